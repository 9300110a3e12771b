"""Read-only execution of one SELECT with a time limit, and comparison of two results.

Guards, each on its own enough to refuse a write: the file is opened with the `mode=ro` URI;
`PRAGMA query_only=ON`; an authorizer that allows only SELECT, column reads, function calls and
recursive CTEs (so INSERT, UPDATE, DELETE, DROP, CREATE, ATTACH, PRAGMA, transactions and
table-valued functions such as json_each and pragma_table_info are denied). Python's sqlite3 refuses more than one statement per call, so `SELECT 1; DROP TABLE t`
fails as a whole. A progress handler aborts a query past its deadline (SQLGym has no time limit),
results stop at `max_rows` rows, the SQL text at `max_chars` characters, any one string or
blob at `MAX_VALUE_BYTES` and a whole result at `MAX_RESULT_BYTES` of text. Errors come back as
`Outcome.error` text, never as exceptions.

Comparison (`same_result`): rows are compared as *multisets* (duplicates count, row order does
not), or as *lists* when the question asks for an order. This is stricter than SQLGym, which
compares sets: our questions say "each once" where they want DISTINCT, so a duplicate row is a
wrong answer. Floats match within `math.isclose(rel_tol=1e-6, abs_tol=1e-6)`, an integral float
equals the integer (AVG over integers vs COUNT), and the columns may come in any order (as in
Spider's execution match): (name, count) and (count, name) both match.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path
from typing import Any

DEFAULT_TIME_LIMIT_S = 2.0
DEFAULT_MAX_ROWS = 1000
DEFAULT_MAX_CHARS = 4000
MAX_VALUE_BYTES = 100_000  # the longest string or blob a query may build
MAX_RESULT_BYTES = 4_000_000  # all strings and blobs of one result together
_PROGRESS_EVERY = 1000  # VM instructions between deadline checks (~tens of microseconds)
_MAX_PERMUTED_COLUMNS = 4  # try every column order up to 4 columns (24 orders)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"}
_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z]+")

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Outcome:
    """What running one query gave: column names and rows, or an error message.

    `truncated` is True when the query had more than `max_rows` rows (only the first are kept).
    """

    columns: tuple[str, ...] = ()
    rows: tuple[Row, ...] = ()
    error: str | None = None
    truncated: bool = False
    elapsed_s: float = field(default=0.0, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    """sqlite3 authorizer: read-only SELECTs only (a function call passes its name as arg2)."""
    if action not in _ALLOWED:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def open_readonly(path: Path, deadline: list[float]) -> sqlite3.Connection:
    """A connection that can only read `path`; queries abort once `time.monotonic() > deadline[0]`."""
    if not path.exists():  # mode=ro never creates a file, but its error message is vague
        raise FileNotFoundError(f"no database file at {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.execute("PRAGMA query_only=ON")
    conn.set_authorizer(_authorize)
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), _PROGRESS_EVERY)
    return conn


def check_sql_text(sql: str, max_chars: int = DEFAULT_MAX_CHARS) -> str | None:
    """Why `sql` cannot be run (empty, too long, not a SELECT), or None when it may be tried."""
    if len(sql) > max_chars:
        return f"the query is {len(sql)} characters long; the limit is {max_chars}. Write a shorter query."
    body = _LEADING_COMMENTS.sub("", sql)
    if not body.strip().rstrip(";").strip():
        return "the query is empty. Reply with one SELECT statement."
    first = _FIRST_WORD.match(body)
    if first is None or first.group(0).upper() not in {"SELECT", "WITH", "VALUES"}:
        word = first.group(0).upper() if first else body[:10]
        return f"only a single read-only SELECT query is allowed, not {word}."
    return None


class ResultTooLarge(ValueError):
    """The rows of a result hold more than MAX_RESULT_BYTES of text and blobs."""


def _fetch(cursor: sqlite3.Cursor, limit: int) -> list[Row]:
    """At most `limit` rows, stopping with ResultTooLarge past MAX_RESULT_BYTES of strings and blobs."""
    rows: list[Row] = []
    size = 0
    while len(rows) < limit:
        batch = cursor.fetchmany(min(100, limit - len(rows)))
        if not batch:
            break
        size += sum(len(v) for row in batch for v in row if isinstance(v, (str, bytes)))
        if size > MAX_RESULT_BYTES:
            raise ResultTooLarge(
                f"the result holds more than {MAX_RESULT_BYTES} bytes of text; select fewer rows or columns."
            )
        rows.extend(batch)
    return rows


def _error_text(exc: Exception, time_limit_s: float) -> str:
    """A short, actionable message for a failed query."""
    message = str(exc)
    if "interrupted" in message:
        return f"the query ran longer than the {time_limit_s:g} s time limit and was stopped."
    if "not authorized" in message or "prohibited" in message or "readonly" in message:
        return f"{message}: only read-only SELECT queries are allowed."
    if "one statement at a time" in message:
        return "only one SQL statement is allowed per reply."
    return message


def run_query(
    path: Path,
    sql: str,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Outcome:
    """Run one read-only query on the database at `path`; never raises for a bad query."""
    problem = check_sql_text(sql, max_chars)
    if problem is not None:
        return Outcome(error=problem)
    start = time.monotonic()
    deadline = [start + time_limit_s]
    try:
        conn = open_readonly(path, deadline)
    except (sqlite3.Error, OSError) as exc:
        return Outcome(error=f"cannot open the database: {exc}")
    try:
        cursor = conn.execute(sql)
        columns = tuple(d[0] for d in cursor.description or ())
        rows = _fetch(cursor, max_rows + 1)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        return Outcome(error=_error_text(exc, time_limit_s), elapsed_s=time.monotonic() - start)
    finally:
        conn.close()
    truncated = len(rows) > max_rows
    return Outcome(columns, tuple(rows[:max_rows]), None, truncated, time.monotonic() - start)


# -- comparison ----------------------------------------------------------------------------------
def _canonical(value: Any) -> Any:
    """An integral float becomes the int (3.0 -> 3); other values stay as they are."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _sort_key(row: Row) -> tuple[Any, ...]:
    """A total order over rows of mixed types: NULL < numbers < text < blobs."""
    rank = {type(None): 0, int: 1, float: 1, str: 2, bytes: 3}
    return tuple((rank.get(type(v), 4), v if v is not None else 0) for v in row)


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
        return numbers and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    return type(a) is type(b) and a == b


def _rows_equal(got: list[Row], want: list[Row]) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(_values_equal(x, y) for x, y in zip(g, w)) for g, w in zip(got, want)
    )


def _match_rows(got: list[Row], want: list[Row], ordered: bool) -> bool:
    """Rows equal as lists (`ordered`) or as multisets (exact first, then sorted with float tolerance)."""
    if ordered:
        return _rows_equal(got, want)
    if Counter(got) == Counter(want):
        return True
    try:
        return _rows_equal(sorted(got, key=_sort_key), sorted(want, key=_sort_key))
    except TypeError:  # unorderable values (cannot happen with SQLite's types; be safe)
        return False


def same_result(got: Outcome, want: Outcome, *, ordered: bool) -> bool:
    """True when `got` has the rows of `want` (see the module docstring for the rules)."""
    if not got.ok or not want.ok or got.truncated or want.truncated:
        return False
    want_rows = [tuple(_canonical(v) for v in row) for row in want.rows]
    got_rows = [tuple(_canonical(v) for v in row) for row in got.rows]
    width = len(want.columns)
    if len(got.columns) != width:
        return False
    orders = permutations(range(width)) if width <= _MAX_PERMUTED_COLUMNS else [tuple(range(width))]
    for order in orders:
        if _match_rows([tuple(row[i] for i in order) for row in got_rows], want_rows, ordered):
            return True
    return False


def preview(outcome: Outcome, rows: int = 5, width: int = 40) -> str:
    """The column names and the first `rows` rows, one per line, long cells cut to `width`."""
    def cell(v: Any) -> str:
        text = "NULL" if v is None else str(v)
        return text if len(text) <= width else text[: width - 3] + "..."

    lines = [" | ".join(outcome.columns)]
    lines += [" | ".join(cell(v) for v in row) for row in outcome.rows[:rows]]
    more = len(outcome.rows) - rows
    if more > 0 or outcome.truncated:
        lines.append(f"... ({'more than ' if outcome.truncated else ''}{len(outcome.rows)} rows in all)")
    return "\n".join(lines)
