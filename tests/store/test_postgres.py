"""The run registry on a real PostgreSQL server (started by the `postgres_url` fixture): API, migrations, concurrency."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from agentrl_core.store import open_registry
from agentrl_core.store.migrate import head_revision, upgrade
from tests.pg_server import create_database
from tests.store.roundtrip import exercise_core_api

pytestmark = pytest.mark.slow  # a real engine, JVM, database, planner or training run: seconds each

REPO = Path(__file__).resolve().parents[2]


def test_core_api_round_trip_on_postgres(postgres_url: str, tmp_path: Path):
    with open_registry(postgres_url, tmp_path) as reg:
        assert reg.engine.dialect.name == "postgresql" and reg.revision() == head_revision()
        exercise_core_api(reg, "pg-run-a")
        exercise_core_api(reg, "pg-run-b")
        assert {"pg-run-a", "pg-run-b"} <= {r.name for r in reg.runs()}
    assert not list(tmp_path.iterdir())  # nothing written locally when the URL is PostgreSQL


def test_postgres_migration_from_0001_and_models_match(postgres_url: str, tmp_path: Path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from agentrl_core.store.schema import Base

    url = create_database(postgres_url)
    engine = create_engine(url)
    upgrade(engine, "0001")
    engine.dispose()
    for _ in range(2):  # upgrading to head, then reopening, changes nothing
        with open_registry(url, tmp_path) as reg:
            assert reg.revision() == head_revision()
            with reg.engine.connect() as conn:
                context = MigrationContext.configure(conn, opts={"compare_type": True})
                assert compare_metadata(context, Base.metadata) == []


def test_two_processes_open_and_write_a_fresh_postgres_database(postgres_url: str, tmp_path: Path):
    url = create_database(postgres_url)  # both race to migrate it: the advisory lock serialises them
    n = 15
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.store.workers", url, str(tmp_path), str(w), str(n)],
                              cwd=REPO, env=env, stderr=subprocess.PIPE, text=True) for w in (0, 1)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with open_registry(url, tmp_path) as reg:
        assert len(reg.checkpoints(run="shared")) == 2 * n
        assert sum(m.value for m in reg.metrics(run="shared")) == 2 * sum(range(n))
