"""Store fixtures: a real PostgreSQL server for the session (`postgres_url`), reused by flow tests."""

from __future__ import annotations

import pytest

from tests.pg_server import find_pg_bin, start_postgres


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory):
    """SQLAlchemy URL (postgresql+psycopg) of a fresh local PostgreSQL cluster, stopped at session end.

    The database is shared by the session: use distinct run names, or `tests.pg_server.create_database`
    for an empty one. Tests outside tests/store reuse it with, in their conftest.py:
    `from tests.store.conftest import postgres_url  # noqa: F401`.
    """
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    url, stop = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield url
    finally:
        stop()
