"""The run registry on SQLite: every API call, idempotency, upserts, redaction, errors, migrations, concurrency."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from agentrl_core.store import EvalRecord, RegistryError, import_stage_metrics, open_registry, redact_url
from agentrl_core.store.migrate import alembic_config, head_revision, upgrade
from agentrl_core.training.metrics_log import MetricsWriter
from tests.store.roundtrip import exercise_core_api

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def reg(tmp_path: Path):
    registry = open_registry(None, tmp_path / "runs")
    yield registry
    registry.close()


def test_default_url_is_sqlite_in_root(tmp_path: Path):
    root = tmp_path / "nested" / "runs"
    with open_registry(None, root) as registry:
        assert registry.url == f"sqlite:///{root.resolve()}/registry.db"
        assert registry.revision() == head_revision() == "0001"
    assert (root / "registry.db").is_file()
    with open_registry(None, root) as again:  # reopening migrates nothing and keeps the data
        assert again.revision() == "0001" and again.runs() == []


def test_core_api_round_trip(reg):
    exercise_core_api(reg, "run-a")
    exercise_core_api(reg, "run-b")  # a second run is independent of the first
    assert [r.name for r in reg.runs()] == ["run-a", "run-b"]
    assert len(reg.checkpoints(kind="hf")) == 2


def test_invalid_arguments_are_rejected(reg):
    run_id = reg.ensure_run("r", recipe={})
    with pytest.raises(ValueError, match="run status must be one of"):
        reg.set_run_status(run_id, "done")
    with pytest.raises(ValueError, match="stage status must be one of"):
        reg.set_stage_status(reg.ensure_stage(run_id, "rl", 0), "ok")
    with pytest.raises(ValueError, match="checkpoint kind must be one of"):
        reg.add_checkpoint(run_id, stage="rl", step=0, uri="u", kind="gguf")
    with pytest.raises(TypeError, match="JSON-serialisable"):
        reg.ensure_run("p", recipe={"root": Path("/x")})
    with pytest.raises(TypeError, match="metric 'loss' must be a number"):
        reg.log_metrics(run_id, stage="rl", step=0, metrics={"loss": "high"})


def test_unknown_ids_and_names_are_clear_errors(reg):
    with pytest.raises(RegistryError, match="no run with id 7; create it with ensure_run"):
        reg.set_run_status(7, "completed")
    with pytest.raises(RegistryError, match="no run with id 7"):
        reg.add_checkpoint(7, stage="rl", step=0, uri="u", kind="train")
    with pytest.raises(RegistryError, match="no run with id 7"):
        reg.log_metrics(7, stage="rl", step=0, metrics={"a": 1.0})
    with pytest.raises(RegistryError, match="no stage with id 3"):
        reg.set_stage_status(3, "running")
    with pytest.raises(RegistryError, match="no run named 'ghost'"):
        reg.add_eval(EvalRecord("u", "e", "test", 0, 1, "hf", 1, 1.0, 1.0, 1.0, run="ghost"))
    assert reg.run("ghost") is None and reg.stages("ghost") == [] and reg.metrics(run="ghost") == []


def test_stage_timestamps_follow_status(reg):
    stage = reg.ensure_stage(reg.ensure_run("r", recipe={}), "rl", 2)
    reg.set_stage_status(stage, "running")
    reg.set_stage_status(stage, "failed")
    first = reg.stages("r")[0]
    assert first.status == "failed" and first.started_at <= first.finished_at
    reg.set_stage_status(stage, "running")  # a retry restarts the clock and clears finished_at
    retried = reg.stages("r")[0]
    assert retried.started_at >= first.finished_at and retried.finished_at is None and retried.index == 2


def test_metric_upsert_in_bulk(reg):
    run_id = reg.ensure_run("r", recipe={})
    records = [(step, {"loss": 1.0 / (step + 1), "inf": math.inf}) for step in range(700)]  # 1400 values > one chunk
    assert reg.log_metrics_many(run_id, stage="rl", records=records) == 1400
    assert reg.log_metrics_many(run_id, stage="rl", records=[(3, {"loss": 9.0}), (3, {"loss": 8.0})]) == 1
    losses = reg.metrics(run="r", names=["loss"])
    assert len(losses) == 700 and losses[3].value == 8.0 and losses[699].value == pytest.approx(1 / 700)
    assert {m.value for m in reg.metrics(run="r", names=["inf"])} == {None}
    assert reg.delete_metrics(run_id, stage="rl", after_step=499) == 400
    assert len(reg.metrics(run="r")) == 1000


@pytest.mark.parametrize("url, expected", [
    ("postgresql+psycopg://alice:s3cret@db:5432/runs", "postgresql+psycopg://alice:***@db:5432/runs"),
    ("postgresql+psycopg://alice@db/runs", "postgresql+psycopg://alice@db/runs"),
    ("postgresql://bob@db/runs?password=s3cret&sslmode=require", "postgresql://bob@db/runs?password=***&sslmode=require"),
    ("sqlite:////tmp/r.db", "sqlite:////tmp/r.db"),
    ("not a url://carol:s3cret@host/x?token=abc", "not a url://carol:***@host/x?token=***"),
    ("postgresql+psycopg//alice:s3cret@db/runs", "postgresql+psycopg//alice:***@db/runs"),
])
def test_redact_url(url, expected):
    assert redact_url(url) == expected


def test_bad_urls_are_clear_errors(tmp_path: Path):
    with pytest.raises(RegistryError, match="is not a SQLAlchemy URL") as err:
        open_registry("postgresql+psycopg//alice:s3cret@db/runs", tmp_path)
    with pytest.raises(RegistryError, match="uses backend 'mysql'; supported: sqlite, postgresql"):
        open_registry("mysql://u:s3cret@localhost/db", tmp_path)
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(RegistryError, match=r"cannot open the registry at sqlite:///.*dir\.db"):
        open_registry(f"sqlite:///{tmp_path / 'dir.db'}", tmp_path)
    assert "s3cret" not in str(err.value)


def test_unreachable_postgres_is_a_clear_error_without_password(tmp_path: Path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql+psycopg://alice:s3cret@127.0.0.1:{port}/runs?connect_timeout=5"
    with pytest.raises(RegistryError) as err:
        open_registry(url, tmp_path)
    message = str(err.value)
    assert f"cannot open the registry at postgresql+psycopg://alice:***@127.0.0.1:{port}/runs?connect_timeout=5:" \
        in message
    assert "Check that the database server is running" in message and "s3cret" not in message


def test_migration_from_0001_reaches_head_and_is_idempotent(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    upgrade(engine, "0001")  # a database created at the first revision, with data in it
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO runs (name, recipe, status, created_at, updated_at) "
                          "VALUES ('old', '{}', 'completed', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"))
    engine.dispose()
    for _ in range(2):
        with open_registry(url, tmp_path) as registry:
            assert registry.revision() == head_revision()
            assert [(r.name, r.status) for r in registry.runs()] == [("old", "completed")]


def test_models_match_migrations(reg):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from agentrl_core.store.schema import Base

    with reg.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_database_from_newer_code_is_refused(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    open_registry(url, tmp_path).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(RegistryError, match="cannot migrate the registry at sqlite:///.*newer agentrl"):
        open_registry(url, tmp_path)
    assert alembic_config().get_main_option("script_location").endswith("migrations")


def test_two_processes_write_without_lock_errors(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"  # fresh: both processes also race to migrate it
    n = 25
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.store.workers", url, str(tmp_path), str(w), str(n)],
                              cwd=REPO, env=env, stderr=subprocess.PIPE, text=True) for w in (0, 1)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with open_registry(url, tmp_path) as registry:
        assert len(registry.runs()) == 1
        assert len(registry.checkpoints(run="shared")) == 2 * n
        values = registry.metrics(run="shared")
        assert len(values) == 2 * n and sum(m.value for m in values) == 2 * sum(range(n))


def test_import_stage_metrics_is_idempotent_and_follows_resume(reg, tmp_path: Path):
    stage_dir = tmp_path / "rl"
    with MetricsWriter(stage_dir, tensorboard=False) as writer:
        for step in (1, 2, 3):
            writer.log(step, {"loss": 1.0 / step, "kl": math.nan if step == 2 else 0.1 * step})
    run_id = reg.ensure_run("r", recipe={})
    assert import_stage_metrics(reg, run_id, "rl", stage_dir) == 6
    assert import_stage_metrics(reg, run_id, "rl", stage_dir) == 6
    got = {(m.name, m.step): m.value for m in reg.metrics(run="r", stage="rl")}
    assert got == {("kl", 1): pytest.approx(0.1), ("kl", 2): None, ("kl", 3): pytest.approx(0.3),
                   ("loss", 1): 1.0, ("loss", 2): 0.5, ("loss", 3): pytest.approx(1 / 3)}
    with MetricsWriter(stage_dir, tensorboard=False, resume_step=1) as writer:  # resumed at 1: step 2 rewritten
        writer.log(2, {"loss": 0.75})
    assert import_stage_metrics(reg, run_id, "rl", stage_dir) == 3
    got = {(m.name, m.step): m.value for m in reg.metrics(run="r", stage="rl")}
    assert got == {("kl", 1): pytest.approx(0.1), ("kl", 2): None, ("loss", 1): 1.0, ("loss", 2): 0.75}
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        import_stage_metrics(reg, run_id, "sft", tmp_path / "missing")


def test_store_config_rejects_other_backends_without_echoing_the_url():
    from pydantic import ValidationError

    from agentrl_core.config import StoreConfig

    assert StoreConfig(registry_url="postgresql+psycopg://u@h:5432/db").registry_url.reveal().startswith("postgresql")
    assert StoreConfig().registry_url is None
    with pytest.raises(ValidationError, match="SQLite or PostgreSQL") as err:
        StoreConfig(registry_url="mysql://u:s3cret@h/db")
    assert "s3cret" not in str(err.value)


def test_cli_upgrade_and_show(tmp_path: Path, capsys):
    from agentrl_core.store.cli import main

    assert main(["upgrade", "--root", str(tmp_path)]) == 0
    with open_registry(None, tmp_path) as registry:
        registry.ensure_stage(registry.ensure_run("r1", recipe={}), "rl", 0)
    assert main(["show", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "revision 0001" in out and "run 'r1' [running] stages=['rl'] checkpoints=0 evals=0" in out
    assert main(["show", "--url", "mysql://u:s3cret@h/db"]) == 1
    err = capsys.readouterr().err
    assert "supported: sqlite, postgresql" in err and "s3cret" not in err
