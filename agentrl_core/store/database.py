"""Database engines of the registry: SQLite in WAL mode with a busy timeout, or PostgreSQL via psycopg 3.

SQLite: every transaction begins with BEGIN IMMEDIATE (the write lock is taken up front and a
busy writer is waited for up to `SQLITE_BUSY_TIMEOUT_S`), so concurrent writers queue instead of
failing with "database is locked"; WAL lets readers run beside the writer. synchronous=NORMAL
(safe with WAL: a power loss may drop the last commits, never corrupts) keeps small commits cheap.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from agentrl_core.store.errors import RegistryError
from agentrl_core.store.urls import redact_url

SQLITE_BUSY_TIMEOUT_S = 30.0


def _sqlite_engine(url: str, echo: bool) -> Engine:
    engine = create_engine(url, echo=echo, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # the driver's own implicit BEGIN is replaced by _on_begin
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: consistent after a crash, fsync per checkpoint
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _missing_driver(url: str, err: ImportError) -> RegistryError:
    return RegistryError(
        f"the database driver for registry URL {redact_url(url)!r} is not installed ({err}); for "
        "PostgreSQL install psycopg 3 (pip install 'psycopg[binary]') and use postgresql+psycopg://")


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for `url` (already resolved by `urls.resolve_url`); connects lazily."""
    backend = make_url(url).get_backend_name()
    try:
        if backend == "sqlite":
            return _sqlite_engine(url, echo)
        return create_engine(url, echo=echo, pool_pre_ping=True)
    except ImportError as err:
        raise _missing_driver(url, err) from None
