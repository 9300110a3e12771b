"""SQL env: generated databases, questions with gold queries, read-only execution, result matching."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl_core.envs import check_env, env_class, make
from agentrl_core.envs.sql import Sql, extract_sql, make_task, run_query, same_result
from agentrl_core.envs.sql.execute import Outcome, open_readonly
from agentrl_core.envs.sql.questions import (
    MAX_GOLD_ROWS,
    TEMPLATES,
    TEST_DBS,
    TRAIN_DBS,
    db_for_task,
)
from agentrl_core.envs.sql.schema import DOMAINS, db_path, ensure_database, generate
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) SELECT count(*) FROM c"


@pytest.fixture(scope="module", autouse=True)
def _home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Databases go to a fresh AGENTRL_HOME, never to the user's cache."""
    home = tmp_path_factory.mktemp("agentrl_home")
    with pytest.MonkeyPatch.context() as mp_:
        mp_.setenv("AGENTRL_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def school(_home: Path) -> Path:
    return ensure_database(0)  # db 0 is the school domain


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _out(rows: list[tuple], columns: tuple[str, ...] = ("a", "b")) -> Outcome:
    return Outcome(columns, tuple(rows))


# -- the contract ---------------------------------------------------------------------------------
def test_registered_and_conforms() -> None:
    assert env_class("sql") is Sql and env_class("sql-v1") is Sql
    check_env(make("sql"), tasks_per_split=5)
    check_env(Sql(max_attempts=1))


def test_splits_and_databases_are_disjoint() -> None:
    env = Sql()
    assert env.task_ids("train") == range(0, 5000) and env.task_ids("test") == range(5000, 5500)
    assert {db_for_task(t) for t in range(5000)} == set(TRAIN_DBS)
    assert {db_for_task(t) for t in range(5000, 5500)} == set(TEST_DBS)
    assert not set(TRAIN_DBS) & set(TEST_DBS)


@pytest.mark.parametrize("task_id", [-1, 5500, 10**9])
def test_unknown_task(task_id: int) -> None:
    with pytest.raises(TaskNotFoundError, match=r"\[0, 5000\)"):
        Sql().reset(task_id=task_id)


def test_bad_construction_and_expert_before_reset() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        Sql(max_attempts=0)
    with pytest.raises(ValueError, match="time_limit_s"):
        Sql(time_limit_s=0)
    with pytest.raises(ResetNeededError):
        Sql().expert_action()


# -- generation -----------------------------------------------------------------------------------
def test_databases_are_deterministic_and_shaped(tmp_path: Path) -> None:
    for db_id in range(8):
        db = generate(db_id)
        assert db == generate.__wrapped__(db_id)  # the same without the cache
        assert db.domain is DOMAINS[db_id % len(DOMAINS)]
        for table in db.domain.tables:
            rows = db.rows[table.name]
            assert table.rows[0] <= len(rows) <= table.rows[1] or table.name == "departments"
            if table.name_column is not None:  # names are unique, so listing names is unambiguous
                names = db.values(table.name, table.name_column.name)
                assert len(set(names)) == len(names)
            for fk in table.of_kind("fk"):  # every foreign key points to an existing parent row
                assert set(db.values(table.name, fk.name)) <= set(db.values(fk.ref, "id"))
    assert generate(0).rows != generate(4).rows  # same domain, different rows
    # two builds in different folders hold the same rows
    a, b = ensure_database(5, tmp_path / "a"), ensure_database(5, tmp_path / "b")
    assert _dump(a) == _dump(b)


def test_tasks_are_deterministic() -> None:
    for task_id in [0, 1, 17, 4999, 5000, 5123, 5499]:
        assert make_task(task_id) == make_task.__wrapped__(task_id)
    obs1, info1 = Sql().reset(task_id=42)
    obs2, info2 = Sql().reset(task_id=42, seed=7)  # the seed is unused
    assert (obs1, info1) == (obs2, info2)
    assert "CREATE TABLE" in obs1 and "Question: " in obs1 and make_task(42).question.sql not in obs1


def test_every_sampled_gold_query_returns_rows() -> None:
    kinds: Counter[str] = Counter()
    for task_id in list(range(0, 5000, 13)) + list(range(5000, 5500, 3)):
        task = make_task(task_id)
        gold = run_query(db_path(task.db_id), task.question.sql)
        assert gold.ok and 1 <= len(gold.rows) <= MAX_GOLD_ROWS, (task_id, task.question, gold)
        assert gold.rows != ((0,),) and gold.rows != ((None,),)
        assert task.question.ordered == ("ORDER BY" in task.question.sql)
        kinds[task.question.kind] += 1
    assert set(kinds) == set(TEMPLATES), set(TEMPLATES) - set(kinds)  # every template is used


# -- reply parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "sql"),
    [
        ("SELECT 1", "SELECT 1"),
        ("  SELECT 1;  ", "SELECT 1"),
        ("Thought: easy.\n\nAction: ```sql\nSELECT name FROM t;\n```", "SELECT name FROM t"),  # SQLGym's style
        ("first ```sql\nSELECT 1\n``` then ```SQL\nSELECT 2\n```", "SELECT 2"),  # the last block counts
        ("```\nSELECT 3\n```", "SELECT 3"),
        ("Here:\n```sql\nSELECT 4", "SELECT 4"),  # an unclosed fence (cut generation)
        ("Thought: hmm\nAction: SELECT 5", "SELECT 5"),
        ("", ""),
    ],
)
def test_extract_sql(reply: str, sql: str) -> None:
    assert extract_sql(reply) == sql


# -- result comparison (hand cases) -----------------------------------------------------------------
def test_order_matters_only_when_asked() -> None:
    want = _out([("x", 1), ("y", 2)])
    reversed_ = _out([("y", 2), ("x", 1)])
    assert same_result(reversed_, want, ordered=False)
    assert not same_result(reversed_, want, ordered=True)
    assert same_result(want, want, ordered=True)


def test_multiset_semantics_floats_and_columns() -> None:
    want = _out([("x", 1), ("x", 1), ("y", 2)])
    assert not same_result(_out([("x", 1), ("y", 2)]), want, ordered=False)  # a duplicate is missing
    assert not same_result(_out([("x", 1), ("y", 2), ("y", 2)]), want, ordered=False)  # same set, wrong counts
    assert same_result(_out([(1, "x"), (2, "y"), (1, "x")], ("b", "a")), want, ordered=False)  # column order free
    assert not same_result(_out([("x",), ("x",), ("y",)], ("a",)), want, ordered=False)  # a column is missing
    floats = _out([("s", 0.1 + 0.2)])
    assert same_result(floats, _out([("s", 0.3)]), ordered=False)  # within 1e-6
    assert not same_result(_out([("s", 0.301)]), _out([("s", 0.3)]), ordered=False)
    assert same_result(_out([("s", 3.0)]), _out([("s", 3)]), ordered=True)  # integral float == int
    assert not same_result(_out([("s", "3")]), _out([("s", 3)]), ordered=False)  # text is not a number
    assert not same_result(Outcome(error="boom"), want, ordered=False)
    truncated = Outcome(("a", "b"), want.rows, truncated=True)
    assert not same_result(truncated, want, ordered=False)


def _first_task(kind: str, ordered: bool) -> int:
    for task_id in range(5000):
        q = make_task(task_id).question
        if q.kind == kind and q.ordered == ordered:
            return task_id
    raise AssertionError(f"no {kind} task")


def test_env_respects_order_by_only_when_asked() -> None:
    env = Sql()
    # an ordered question: the right rows in the opposite order are wrong
    task_id = _first_task("sorted_list", True)
    env.reset(task_id=task_id)
    sql = make_task(task_id).question.sql
    flipped = sql.replace(" DESC,", " TMP,").replace(" ASC,", " DESC,").replace(" TMP,", " ASC,")
    gold_rows = run_query(db_path(make_task(task_id).db_id), sql).rows
    if len({row[1] for row in gold_rows}) > 1:  # with one distinct value the flip changes nothing
        assert not env.step(flipped).info["success"]
    assert env.step(sql).info["success"]
    # an unordered question: any order is right
    task_id = _first_task("list_where", False)
    env.reset(task_id=task_id)
    result = env.step(make_task(task_id).question.sql + " ORDER BY 1 DESC")
    assert result.info["success"] and result.reward == 1.0


# -- read-only execution --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO students VALUES (999, 'X', 'Y', 1, 2.0)",
        "UPDATE students SET gpa = 4.0",
        "DELETE FROM students",
        "DROP TABLE students",
        "CREATE TABLE t (x)",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA query_only = OFF",
        "PRAGMA writable_schema = 1",
        "VACUUM",
        "BEGIN",
        "SELECT 1; DROP TABLE students",
        "SELECT 1; DROP TABLE students;",
        "WITH x AS (SELECT 1) DELETE FROM students",
        "WITH x AS (SELECT 1) INSERT INTO students SELECT * FROM students",
        "SELECT load_extension('/tmp/evil')",
        "SELECT * FROM pragma_table_info('students')",
    ],
)
def test_writes_are_refused(school: Path, sql: str) -> None:
    before = _sha(school)
    outcome = run_query(school, sql)
    assert outcome.error and outcome.rows == ()
    assert _sha(school) == before and run_query(school, "SELECT count(*) FROM students").ok


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO students VALUES (999, 'X', 'Y', 1, 2.0)",
        "DELETE FROM students",
        "DROP TABLE students",
        "CREATE TABLE t (x)",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA query_only = OFF",
    ],
)
def test_authorizer_alone_denies_writes(school: Path, sql: str) -> None:
    """The connection itself refuses writes, even without the SELECT-only text check."""
    conn = open_readonly(school, [float("inf")])
    try:
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
            conn.execute(sql)
        assert conn.execute("SELECT count(*) FROM students").fetchone()[0] > 0
    finally:
        conn.close()


def test_env_write_attempt_is_an_error_observation() -> None:
    env = Sql()
    env.reset(task_id=0)
    result = env.step("```sql\nSELECT 1; DROP TABLE enrollments\n```")
    assert result.observation.startswith("Error: only one SQL statement")
    assert (result.reward, result.terminated, result.info["error"]) == (0.0, False, True)


def test_time_limit_stops_a_slow_query(school: Path) -> None:
    start = time.monotonic()
    outcome = run_query(school, SLOW)  # the default 2 s limit
    elapsed = time.monotonic() - start
    assert outcome.error and "time limit" in outcome.error
    assert 1.9 <= elapsed < 3.0
    env = Sql(time_limit_s=0.3)
    env.reset(task_id=0)
    start = time.monotonic()
    result = env.step(SLOW)
    assert time.monotonic() - start < 1.5
    assert result.observation.startswith("Error: the query ran longer than the 0.3 s time limit")


def test_caps_on_rows_text_and_values(school: Path) -> None:
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    outcome = run_query(school, endless, max_rows=50)
    assert outcome.ok and outcome.truncated and len(outcome.rows) == 50
    long_sql = "SELECT 1" + " " * 5000
    assert "characters long" in (run_query(school, long_sql).error or "")
    assert "too big" in (run_query(school, "SELECT zeroblob(1000000000)").error or "")
    env = Sql(max_rows=10)
    env.reset(task_id=0)
    result = env.step("SELECT * FROM enrollments")
    assert result.observation.startswith("Wrong result. Your query returned more than 10 rows")


# -- episodes -----------------------------------------------------------------------------------------
def test_wrong_result_shows_the_models_rows_not_the_gold() -> None:
    env = Sql(max_attempts=2)
    env.reset(task_id=0)
    first = env.step("SELECT 'zzz' AS guess, 41 AS n")
    assert first.observation == (
        "Wrong result. Your query returned 1 row; the first ones:\nguess | n\nzzz | 41\nTry again (1 attempt left)."
    )
    assert (first.reward, first.terminated, first.truncated, first.info["success"]) == (0.0, False, False, False)
    last = env.step("SELECT nope FROM students")
    assert last.observation == "Error: no such column: nope\nNo attempts left."
    assert (last.reward, last.terminated, last.truncated, last.info) == (
        0.0, True, False, {"success": False, "attempts": 2, "error": True}
    )
    with pytest.raises(ResetNeededError):
        env.step("SELECT 1")


def test_expert_wins_in_one_step_with_or_without_fences() -> None:
    env = Sql()
    for task_id in list(range(0, 5000, 97)) + list(range(5000, 5500, 31)):
        env.reset(task_id=task_id)
        expert = env.expert_action()
        assert expert.startswith("```sql\n") and expert.endswith("\n```")
        result = env.step(expert)
        assert (result.reward, result.terminated, result.info["success"]) == (1.0, True, True)
        env.reset(task_id=task_id)
        assert env.step(make_task(task_id).question.sql + ";").reward == 1.0  # a bare query


# -- the cache ------------------------------------------------------------------------------------------
def _build(folder: str, db_id: int, barrier: object) -> int:
    """Wait for the other workers, build the same database at once, then read it back."""
    barrier.wait(timeout=30)  # type: ignore[attr-defined]
    conn = sqlite3.connect(ensure_database(db_id, Path(folder)))
    try:
        return conn.execute("SELECT count(*) FROM orders").fetchone()[0]
    finally:
        conn.close()


def test_concurrent_builds_are_safe(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    workers = 4
    with ctx.Manager() as manager, ctx.Pool(workers) as pool:
        barrier = manager.Barrier(workers)
        counts = pool.starmap(_build, [(str(tmp_path), 13, barrier)] * workers, chunksize=1)
    assert counts == [len(generate(13).rows["orders"])] * workers  # db 13 is a shop: every worker saw all rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db-00013.sqlite"]  # no temporary files left
    conn = sqlite3.connect(tmp_path / "db-00013.sqlite")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
