"""The SQL environment (SQLGym-style): answer a question about a generated SQLite database with a query.

Observation: the CREATE TABLE statements and the question. The model replies with one SELECT;
accepted forms, in this order of precedence: the last ```sql (or bare ```) fenced block, which also
covers SQLGym's "Thought: ... Action: ```sql ...```" style; else the text after the last "Action:";
else the whole reply. Each reply is one attempt (so `max_steps == max_attempts`): the query runs
read-only with a time limit and is compared with the gold query's result (see `execute.py`:
multisets of rows, lists when the question asks for an order, float tolerance, any column order).
A match -> reward 1.0 and the episode ends. An error -> "Error: <message>"; a mismatch ->
"Wrong result." with the first rows of the model's own result (never the gold's); after the last
attempt the episode ends (terminated) with reward 0.0.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.envs.sql.execute import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIME_LIMIT_S,
    Outcome,
    preview,
    run_query,
    same_result,
)
from agentrl_core.envs.sql.questions import TEST_IDS, TRAIN_IDS, Task, make_task
from agentrl_core.envs.sql.schema import ensure_database, generate
from agentrl_core.errors import ResetNeededError

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n?(.*)$", re.DOTALL | re.IGNORECASE)
_ACTION = re.compile(r"action\s*:", re.IGNORECASE)
_GOLD_TIME_LIMIT_S = 10.0  # the gold is cheap; a generous limit keeps a loaded machine from failing it


def extract_sql(reply: str) -> str:
    """The query in a reply (see the module docstring for the accepted forms), without a trailing `;`."""
    fenced = _FENCE.findall(reply)
    if fenced:
        sql = fenced[-1]
    elif "```" in reply:  # an unclosed fence, e.g. a generation cut at the token limit
        match = _OPEN_FENCE.search(reply[reply.rfind("```"):])
        sql = match.group(1) if match else ""
    else:
        parts = _ACTION.split(reply)
        sql = parts[-1]
    return sql.strip().rstrip(";").strip()


def _attempts_left(left: int) -> str:
    if left <= 0:
        return "No attempts left."
    return f"Try again ({left} attempt{'s' if left != 1 else ''} left)."


@register
class Sql(Env):
    """Text-to-SQL on generated SQLite databases, judged by execution match, with retries and feedback.

    A task id fixes the database and the question (the reset `seed` is unused). Databases are
    built on first use under `cache_dir` (default `$AGENTRL_HOME/sql/v<version>/`).
    """

    name = "sql"
    version = 1
    agentgym_convention = "B"  # SQLGym's server: env_idx, item_id
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 5000), test [5000, 5500)
    action_format = (
        "One SQLite SELECT query, preferably in a ```sql fenced block, e.g. "
        "```sql\nSELECT name FROM students WHERE city = 'Brenmoor'\n```"
    )
    system_prompt = (
        "You answer questions about a SQLite database by writing one SELECT query. "
        "Think briefly, then give the query in a ```sql fenced block. Select exactly the columns the "
        "question asks for."
    )
    max_steps = 3  # the default max_attempts; instances take theirs from the constructor

    def __init__(
        self,
        max_attempts: int = 3,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_sql_chars: int = DEFAULT_MAX_CHARS,
        preview_rows: int = 5,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if time_limit_s <= 0 or max_rows < 1 or max_sql_chars < 1 or preview_rows < 0:
            raise ValueError(
                "time_limit_s must be > 0, max_rows and max_sql_chars >= 1, preview_rows >= 0; got "
                f"{time_limit_s}, {max_rows}, {max_sql_chars}, {preview_rows}"
            )
        self.max_attempts = self.max_steps = max_attempts
        self.time_limit_s, self.max_rows, self.max_sql_chars = time_limit_s, max_rows, max_sql_chars
        self.preview_rows = preview_rows
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self._task: Task | None = None
        self._path: Path | None = None
        self._gold: Outcome | None = None
        self._attempts = 0

    @property
    def task(self) -> Task:
        """The current task (after reset)."""
        if self._task is None:
            raise ResetNeededError("sql: no task yet; call reset() first")
        return self._task

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = make_task(int(task_id), self.cache_dir)
        self._task, self._attempts = task, 0
        self._path = ensure_database(task.db_id, self.cache_dir)
        self._gold = run_query(self._path, task.question.sql, time_limit_s=_GOLD_TIME_LIMIT_S)
        if not self._gold.ok:  # cannot happen for validated questions unless the file is damaged
            raise RuntimeError(f"sql: the gold query of task {task_id} failed: {self._gold.error}")
        db = generate(task.db_id)
        obs = (
            f"Database schema (SQLite):\n{db.schema_sql()}\n\nQuestion: {task.question.text}\n"
            f"Reply with one SQLite SELECT query in a ```sql block. You have {self.max_attempts} "
            f"attempt{'s' if self.max_attempts != 1 else ''}."
        )
        info = {
            "db_id": task.db_id, "domain": db.domain.name, "kind": task.question.kind,
            "ordered": task.question.ordered, "attempts": 0,
        }
        return obs, info

    def _step(self, action: str) -> StepResult:
        task = self.task
        assert self._path is not None and self._gold is not None  # set together with the task
        self._attempts += 1
        got = run_query(
            self._path, extract_sql(action),
            time_limit_s=self.time_limit_s, max_rows=self.max_rows, max_chars=self.max_sql_chars,
        )
        solved = same_result(got, self._gold, ordered=task.question.ordered)
        info: dict[str, Any] = {"success": solved, "attempts": self._attempts, "error": got.error is not None}
        if solved:
            count = len(got.rows)
            return StepResult(f"Correct! The query returned the expected {count} row{'s' * (count != 1)}.",
                              1.0, True, False, info)
        left = self.max_attempts - self._attempts
        return StepResult(f"{self._feedback(got)}\n{_attempts_left(left)}", 0.0, left <= 0, False, info)

    def _feedback(self, got: Outcome) -> str:
        """The error, or "Wrong result." with the first rows of the model's own result."""
        if got.error is not None:
            return f"Error: {got.error}"
        count = f"more than {self.max_rows}" if got.truncated else str(len(got.rows))
        text = f"Wrong result. Your query returned {count} row{'s' * (count != '1')}"
        if self.preview_rows == 0 or not got.rows:
            return text + "."
        return f"{text}; the first ones:\n{preview(got, rows=self.preview_rows)}"

    def expert_action(self) -> str:
        """The gold query, in a ```sql fenced block."""
        return f"```sql\n{self.task.question.sql}\n```"
