"""Generated questions with gold queries: templates over a database's schema and values.

Task id -> (db id, question, gold SQL). Train tasks [0, 5000) ask about train databases
[0, 40) (db = task_id % 40); test tasks [5000, 5500) ask about test databases [40, 50)
(db = 40 + (task_id - 5000) % 10), so test questions are about databases never seen in training.
A task's template and parameters come from `random.Random(f"sql-v<version>-q:<task_id>")`; values
and thresholds are drawn from the database's own rows. A draft is kept only when its gold query
runs, returns 1 to MAX_GOLD_ROWS rows (a single value must not be 0 or NULL), and, for questions
about a top-k or a maximum, no tie decides which rows belong in the answer; otherwise the next
draft is tried (at most MAX_DRAFTS).

Templates: filters on a category, a number or a date; counts; aggregates (highest, lowest, total,
average rounded to 2 places); GROUP BY with counts and aggregates; HAVING; ORDER BY + LIMIT;
sorted lists; DISTINCT; joins (exists, group counts, the parent with the most children,
aggregates over a parent filter) and two-hop joins through a link table. `ordered` is True only
when the question asks for an order; then results are compared as lists.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrl_core.envs.sql.execute import run_query
from agentrl_core.envs.sql.schema import (
    GENERATOR_VERSION,
    Column,
    Database,
    Table,
    ensure_database,
    generate,
)
from agentrl_core.errors import TaskNotFoundError

TRAIN_IDS = range(0, 5000)
TEST_IDS = range(5000, 5500)
TRAIN_DBS = range(0, 40)
TEST_DBS = range(40, 50)
MAX_GOLD_ROWS = 30
MAX_DRAFTS = 200
_COMPARE = ((">", "greater than"), ("<", "less than"), (">=", "at least"), ("<=", "at most"))
_AGGREGATES = (("MAX", "highest"), ("MIN", "lowest"), ("SUM", "total"), ("AVG", "average"))
_ROUNDED = " Round it to 2 decimal places."
_ROUNDED_EACH = " Round each value to 2 decimal places."


@dataclass(frozen=True)
class Question:
    """A natural-language question, its gold SQL, whether row order matters, and its template."""

    text: str
    sql: str
    ordered: bool
    kind: str


@dataclass(frozen=True)
class Draft:
    """A question before validation; `probe` (optional) must return values with no ties."""

    question: Question
    probe: str | None = None


@dataclass(frozen=True)
class Task:
    """One task: the database it is about and the question."""

    task_id: int
    db_id: int
    question: Question


def db_for_task(task_id: int) -> int:
    """The database a task asks about (train and test tasks use disjoint databases)."""
    if task_id in TRAIN_IDS:
        return TRAIN_DBS[task_id % len(TRAIN_DBS)]
    if task_id in TEST_IDS:
        return TEST_DBS[(task_id - TEST_IDS.start) % len(TEST_DBS)]
    raise TaskNotFoundError(
        f"sql has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
        f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
    )


# -- small helpers -------------------------------------------------------------------------------
def sql_literal(value: Any) -> str:
    """A SQL literal for a generated value (strings single-quoted, quotes doubled)."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _say(value: Any) -> str:
    """A value as the question writes it: strings in double quotes, numbers bare."""
    return f'"{value}"' if isinstance(value, str) else str(value)


def _a(noun: str) -> str:
    return ("an " if noun[0].lower() in "aeiou" else "a ") + noun


def _tables(db: Database, need: Callable[[Table], bool]) -> list[Table]:
    return [t for t in db.domain.tables if need(t)]


def _numbers(t: Table) -> list[Column]:
    return t.of_kind("int", "real")


def _threshold(rng: random.Random, values: list[Any]) -> Any:
    """A value from the middle half of the sorted column, so filters keep some rows and drop some."""
    ordered = sorted(values)
    return ordered[rng.randint(len(ordered) // 4, (3 * len(ordered)) // 4)]


def _condition(db: Database, rng: random.Random, table: Table, alias: str = "") -> tuple[str, str] | None:
    """(SQL condition, its words) on a random category or number column of `table`."""
    columns = table.of_kind("category", "int", "real")
    if not columns:
        return None
    col = rng.choice(columns)
    ref = f"{alias}.{col.name}" if alias else col.name
    values = db.values(table.name, col.name)
    if col.kind == "category":
        value = rng.choice(sorted(set(values)))
        return f"{ref} = {sql_literal(value)}", f"whose {col.noun} is {_say(value)}"
    op, words = rng.choice(_COMPARE)
    value = _threshold(rng, values)
    return f"{ref} {op} {sql_literal(value)}", f"whose {col.noun} is {words} {value}"


def _children(db: Database, parent_needs: Callable[[Table], bool]) -> list[tuple[Table, Column, Table]]:
    """(child, fk column, parent) for every fk whose parent satisfies `parent_needs`."""
    out = []
    for child in db.domain.tables:
        for fk in child.of_kind("fk"):
            parent = db.domain.table(fk.ref)
            if parent_needs(parent):
                out.append((child, fk, parent))
    return out


def _aggregate(rng: random.Random, col: Column, ref: str) -> tuple[str, str, str]:
    """(SQL expression, adjective, rounding sentence) for a random aggregate of a number column."""
    func, word = rng.choice(_AGGREGATES)
    rounded = func == "AVG" or (func == "SUM" and col.kind == "real")
    expr = f"ROUND({func}({ref}), 2)" if rounded else f"{func}({ref})"
    return expr, word, _ROUNDED if rounded else ""


# -- templates: each returns a Draft, or None when the database has no fitting table ---------------
def _list_where(db: Database, rng: random.Random) -> Draft | None:
    tables = _tables(db, lambda t: t.name_column is not None)
    table = rng.choice(tables)
    cond = _condition(db, rng, table)
    if cond is None:
        return None
    name = table.name_column
    text = f"List the {name.noun}s of all {table.plural} {cond[1]}."
    return Draft(Question(text, f"SELECT {name.name} FROM {table.name} WHERE {cond[0]}", False, "list_where"))


def _list_by_date(db: Database, rng: random.Random) -> Draft | None:
    tables = _tables(db, lambda t: t.name_column is not None and bool(t.of_kind("date")))
    if not tables:
        return None
    table = rng.choice(tables)
    col, name = table.of_kind("date")[0], table.name_column
    day = _threshold(rng, db.values(table.name, col.name))
    before = rng.random() < 0.5
    op, words = ("<", "before") if before else (">", "after")
    text = (
        f"List the {name.noun}s of the {table.plural} whose {col.noun} is {words} {day} "
        "(dates are 'YYYY-MM-DD' text)."
    )
    sql = f"SELECT {name.name} FROM {table.name} WHERE {col.name} {op} {sql_literal(day)}"
    return Draft(Question(text, sql, False, "list_by_date"))


def _count_where(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(db.domain.tables)
    cond = _condition(db, rng, table)
    if cond is None:
        return None
    text = f"How many {table.plural} are there {cond[1]}?"
    return Draft(Question(text, f"SELECT COUNT(*) FROM {table.name} WHERE {cond[0]}", False, "count_where"))


def _count_year(db: Database, rng: random.Random) -> Draft | None:
    tables = _tables(db, lambda t: bool(t.of_kind("date")))
    if not tables:
        return None
    table = rng.choice(tables)
    col = table.of_kind("date")[0]
    year = rng.choice(sorted({v[:4] for v in db.values(table.name, col.name)}))
    text = f"How many {table.plural} have a {col.noun} in the year {year}? (Dates are 'YYYY-MM-DD' text.)"
    sql = f"SELECT COUNT(*) FROM {table.name} WHERE strftime('%Y', {col.name}) = {sql_literal(year)}"
    return Draft(Question(text, sql, False, "count_year"))


def _aggregate_where(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: bool(_numbers(t))))
    col = rng.choice(_numbers(table))
    expr, word, rounded = _aggregate(rng, col, col.name)
    cats = table.of_kind("category")
    if cats and rng.random() < 0.5:
        cat = rng.choice(cats)
        value = rng.choice(sorted(set(db.values(table.name, cat.name))))
        text = f"What is the {word} {col.noun} of the {table.plural} whose {cat.noun} is {_say(value)}?{rounded}"
        sql = f"SELECT {expr} FROM {table.name} WHERE {cat.name} = {sql_literal(value)}"
    else:
        text = f"What is the {word} {col.noun} of all {table.plural}?{rounded}"
        sql = f"SELECT {expr} FROM {table.name}"
    return Draft(Question(text, sql, False, "aggregate"))


def _group_count(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: bool(t.of_kind("category"))))
    cat = rng.choice(table.of_kind("category"))
    text = f"For each {cat.noun}, how many {table.plural} are there? Return the {cat.noun} and the count."
    sql = f"SELECT {cat.name}, COUNT(*) FROM {table.name} GROUP BY {cat.name}"
    return Draft(Question(text, sql, False, "group_count"))


def _group_aggregate(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: bool(t.of_kind("category")) and bool(_numbers(t))))
    cat, col = rng.choice(table.of_kind("category")), rng.choice(_numbers(table))
    expr, word, rounded = _aggregate(rng, col, col.name)
    text = (
        f"For each {cat.noun}, what is the {word} {col.noun} of the {table.plural}? "
        f"Return the {cat.noun} and that value.{_ROUNDED_EACH if rounded else ''}"
    )
    sql = f"SELECT {cat.name}, {expr} FROM {table.name} GROUP BY {cat.name}"
    return Draft(Question(text, sql, False, "group_aggregate"))


def _having(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: bool(t.of_kind("category"))))
    cat = rng.choice(table.of_kind("category"))
    counts = sorted(Counter(db.values(table.name, cat.name)).values())
    if len(counts) < 2:
        return None
    n = rng.choice(counts[1:]) - 1  # at least one group has more, at least one has fewer or equal
    text = f"Which {cat.noun} values have more than {n} {table.plural}? List each {cat.noun} once."
    sql = f"SELECT {cat.name} FROM {table.name} GROUP BY {cat.name} HAVING COUNT(*) > {n}"
    return Draft(Question(text, sql, False, "having"))


def _top_k(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: t.name_column is not None and bool(_numbers(t))))
    col, name = rng.choice(_numbers(table)), table.name_column
    k, highest = rng.randint(1, 5), rng.random() < 0.5
    word, order = ("highest", "DESC") if highest else ("lowest", "ASC")
    if k == 1:
        text = f"Which {table.singular} has the {word} {col.noun}? Give its {name.noun}."
    else:
        direction = "from highest to lowest" if highest else "from lowest to highest"
        text = f"List the {name.noun}s of the {k} {table.plural} with the {word} {col.noun}, ordered {direction}."
    sql = f"SELECT {name.name} FROM {table.name} ORDER BY {col.name} {order} LIMIT {k}"
    probe = f"SELECT {col.name} FROM {table.name} ORDER BY {col.name} {order} LIMIT {k + 1}"
    return Draft(Question(text, sql, True, "top_k"), probe)


def _sorted_list(db: Database, rng: random.Random) -> Draft | None:
    tables = _tables(db, lambda t: t.name_column is not None and bool(_numbers(t)) and bool(t.of_kind("category")))
    table = rng.choice(tables)
    col, name, cat = rng.choice(_numbers(table)), table.name_column, rng.choice(table.of_kind("category"))
    value = rng.choice(sorted(set(db.values(table.name, cat.name))))
    ascending = rng.random() < 0.5
    words, order = ("from lowest to highest", "ASC") if ascending else ("from highest to lowest", "DESC")
    text = (
        f"List the {name.noun} and {col.noun} of every {table.singular} whose {cat.noun} is {_say(value)}, "
        f"sorted by {col.noun} {words}; break ties by {name.noun} in alphabetical order."
    )
    sql = (
        f"SELECT {name.name}, {col.name} FROM {table.name} WHERE {cat.name} = {sql_literal(value)} "
        f"ORDER BY {col.name} {order}, {name.name} ASC"
    )
    return Draft(Question(text, sql, True, "sorted_list"))


def _distinct(db: Database, rng: random.Random) -> Draft | None:
    table = rng.choice(_tables(db, lambda t: bool(t.of_kind("category")) and bool(_numbers(t))))
    cat, col = rng.choice(table.of_kind("category")), rng.choice(_numbers(table))
    op, words = rng.choice(_COMPARE)
    value = _threshold(rng, db.values(table.name, col.name))
    text = (
        f"Which different {cat.noun} values occur among the {table.plural} whose {col.noun} is "
        f"{words} {value}? List each once."
    )
    sql = f"SELECT DISTINCT {cat.name} FROM {table.name} WHERE {col.name} {op} {sql_literal(value)}"
    return Draft(Question(text, sql, False, "distinct"))


def _join_exists(db: Database, rng: random.Random) -> Draft | None:
    child, fk, parent = rng.choice(_children(db, lambda p: p.name_column is not None))
    cond = _condition(db, rng, child, "c")
    if cond is None:
        return None
    name = parent.name_column
    text = (
        f"Which {parent.plural} have at least one {child.singular} {cond[1]}? "
        f"Give their {name.noun}s, each once."
    )
    sql = (
        f"SELECT DISTINCT p.{name.name} FROM {parent.name} AS p JOIN {child.name} AS c "
        f"ON c.{fk.name} = p.id WHERE {cond[0]}"
    )
    return Draft(Question(text, sql, False, "join_exists"))


def _join_count(db: Database, rng: random.Random) -> Draft | None:
    child, fk, parent = rng.choice(_children(db, lambda p: p.name_column is not None))
    name = parent.name_column
    text = (
        f"For each {parent.singular} that has at least one {child.singular}, how many {child.plural} "
        f"does it have? Return the {parent.singular}'s {name.noun} and the count."
    )
    sql = (
        f"SELECT p.{name.name}, COUNT(*) FROM {parent.name} AS p JOIN {child.name} AS c "
        f"ON c.{fk.name} = p.id GROUP BY p.id"
    )
    return Draft(Question(text, sql, False, "join_count"))


def _join_top(db: Database, rng: random.Random) -> Draft | None:
    child, fk, parent = rng.choice(_children(db, lambda p: p.name_column is not None))
    name = parent.name_column
    text = f"Which {parent.singular} has the most {child.plural}? Give its {name.noun}."
    joined = f"FROM {parent.name} AS p JOIN {child.name} AS c ON c.{fk.name} = p.id GROUP BY p.id"
    sql = f"SELECT p.{name.name} {joined} ORDER BY COUNT(*) DESC LIMIT 1"
    probe = f"SELECT COUNT(*) {joined} ORDER BY COUNT(*) DESC LIMIT 2"
    return Draft(Question(text, sql, True, "join_top"), probe)


def _join_aggregate(db: Database, rng: random.Random) -> Draft | None:
    options = [(c, fk, p) for c, fk, p in _children(db, lambda p: bool(p.of_kind("category"))) if _numbers(c)]
    child, fk, parent = rng.choice(options)
    col, cat = rng.choice(_numbers(child)), rng.choice(parent.of_kind("category"))
    value = rng.choice(sorted(set(db.values(parent.name, cat.name))))
    expr, word, rounded = _aggregate(rng, col, f"c.{col.name}")
    text = (
        f"What is the {word} {col.noun} of the {child.plural} whose {fk.noun}'s {cat.noun} is "
        f"{_say(value)}?{rounded}"
    )
    sql = (
        f"SELECT {expr} FROM {child.name} AS c JOIN {parent.name} AS p ON c.{fk.name} = p.id "
        f"WHERE p.{cat.name} = {sql_literal(value)}"
    )
    return Draft(Question(text, sql, False, "join_aggregate"))


def _two_hop(db: Database, rng: random.Random) -> Draft | None:
    links = [t for t in db.domain.tables if len(t.of_kind("fk")) == 2]
    if not links:
        return None
    link = rng.choice(links)
    fk_a, fk_b = rng.sample(link.of_kind("fk"), 2)
    a, b = db.domain.table(fk_a.ref), db.domain.table(fk_b.ref)
    cond = _condition(db, rng, b, "b")
    if a.name_column is None or cond is None:
        return None
    name = a.name_column
    text = (
        f"Which {a.plural} have {_a(link.singular)} with {_a(b.singular)} {cond[1]}? "
        f"Give their {name.noun}s, each once."
    )
    sql = (
        f"SELECT DISTINCT a.{name.name} FROM {a.name} AS a JOIN {link.name} AS l ON l.{fk_a.name} = a.id "
        f"JOIN {b.name} AS b ON l.{fk_b.name} = b.id WHERE {cond[0]}"
    )
    return Draft(Question(text, sql, False, "two_hop"))


TEMPLATES: dict[str, Callable[[Database, random.Random], Draft | None]] = {
    "list_where": _list_where,
    "list_by_date": _list_by_date,
    "count_where": _count_where,
    "count_year": _count_year,
    "aggregate": _aggregate_where,
    "group_count": _group_count,
    "group_aggregate": _group_aggregate,
    "having": _having,
    "top_k": _top_k,
    "sorted_list": _sorted_list,
    "distinct": _distinct,
    "join_exists": _join_exists,
    "join_count": _join_count,
    "join_top": _join_top,
    "join_aggregate": _join_aggregate,
    "two_hop": _two_hop,
}


# -- validation and the task table ---------------------------------------------------------------
def _acceptable(path: Path, draft: Draft) -> bool:
    """The gold runs and gives 1..MAX_GOLD_ROWS rows, not a lone 0/NULL; the probe has no ties."""
    gold = run_query(path, draft.question.sql)
    if not gold.ok or gold.truncated or not 1 <= len(gold.rows) <= MAX_GOLD_ROWS:
        return False
    if len(gold.rows) == 1 and len(gold.rows[0]) == 1 and gold.rows[0][0] in (0, None):
        return False
    if draft.probe is not None:
        probe = run_query(path, draft.probe)
        keys = [row[0] for row in probe.rows]
        if not probe.ok or len(set(keys)) != len(keys):
            return False
    return True


def draft_question(db: Database, path: Path, rng: random.Random) -> Question:
    """The first acceptable draft from random templates (raises if MAX_DRAFTS drafts all fail)."""
    names = list(TEMPLATES)
    for _ in range(MAX_DRAFTS):
        draft = TEMPLATES[rng.choice(names)](db, rng)
        if draft is not None and _acceptable(path, draft):
            return draft.question
    raise RuntimeError(f"sql: no acceptable question for database {db.db_id} after {MAX_DRAFTS} drafts")


@lru_cache(maxsize=8192)
def make_task(task_id: int, folder: Path | None = None) -> Task:
    """The task of `task_id` (builds its database file in `folder` first when missing)."""
    db_id = db_for_task(task_id)
    path = ensure_database(db_id, folder)
    rng = random.Random(f"sql-v{GENERATOR_VERSION}-q:{task_id}")
    return Task(task_id, db_id, draft_question(generate(db_id), path, rng))
