"""The registry on a full disk: SQLite's real SQLITE_FULL ("database or disk is full") becomes one
DiskFullError naming the database file, the failed transaction leaves no row, and writing works again."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from agentrl_core.errors import DiskFullError
from agentrl_core.store import open_registry
from agentrl_core.store.disk_full import registry_disk_full


def _cap_pages(registry, limit: dict) -> None:
    """Every connection the registry checks out is held to `limit["pages"]` database pages: SQLite then
    fails a write that would grow the file with SQLITE_FULL, exactly as on a full filesystem."""

    @event.listens_for(registry.engine, "checkout")
    def _cap(dbapi_conn, _record, _proxy) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count = {limit['pages']}")


def _metrics(step: int, count: int = 400) -> dict[str, float]:
    return {f"metric_with_a_long_name_{i:04d}": float(step * i) for i in range(count)}


def test_a_full_database_raises_disk_full_and_keeps_every_committed_row(tmp_path):
    with open_registry(None, tmp_path) as registry:
        run_id = registry.ensure_run("r", recipe={})
        registry.log_metrics(run_id, stage="grpo", step=1, metrics=_metrics(1, 10))
        limit = {"pages": 1}  # below the current size: SQLite holds it at the current size, so no growth
        _cap_pages(registry, limit)
        with pytest.raises(DiskFullError) as info:
            registry.log_metrics(run_id, stage="grpo", step=2, metrics=_metrics(2))
        assert str(tmp_path / "registry.db") in str(info.value) and "MiB free on" in str(info.value)
        assert {m.step for m in registry.metrics(run="r")} == {1}  # the failed transaction wrote nothing
        limit["pages"] = 1_000_000  # space freed
        registry.log_metrics(run_id, stage="grpo", step=2, metrics=_metrics(2))
        assert {m.step for m in registry.metrics(run="r")} == {1, 2}


class _PgDiskFull(Exception):
    sqlstate = "53100"  # PostgreSQL's disk_full condition


def test_postgres_disk_full_names_the_server_not_a_local_path():
    err = registry_disk_full("postgresql+psycopg://agent:s3cret@db.example:5432/runs", _PgDiskFull("could not extend"))
    assert isinstance(err, DiskFullError) and err.free_bytes is None
    assert "db.example" in str(err) and "the database server" in str(err) and "s3cret" not in str(err)
    assert registry_disk_full("sqlite:////tmp/x.db", ValueError("no such column")) is None
