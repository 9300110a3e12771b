"""A registry write that failed for lack of space, as the DiskFullError every other write path raises.

SQLite says "database or disk is full" (SQLITE_FULL) for a full filesystem, a quota or its own
page limit; PostgreSQL reports a full disk on the database server as SQLSTATE 53100.
"""

from __future__ import annotations

import sqlite3

from agentrl_core.system.diskfull import disk_full_error, is_disk_full
from agentrl_core.errors import DiskFullError
from agentrl_core.store.urls import redact_url

PG_DISK_FULL = "53100"


def _sqlite_file(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return database


def registry_disk_full(url: str, err: BaseException) -> DiskFullError | None:
    """The DiskFullError for a failed registry operation on `url`, or None when `err` is something else."""
    orig = getattr(err, "orig", None) or err
    if getattr(orig, "sqlstate", None) == PG_DISK_FULL:  # the space is on the server: not measurable here
        return DiskFullError(f"the registry database {redact_url(url)}", None, "the database server")
    full = getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or is_disk_full(err)
    if not full:
        return None
    path = _sqlite_file(url)
    return disk_full_error(path) if path else DiskFullError(f"the registry database {redact_url(url)}")
