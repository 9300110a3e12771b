"""Schema migrations of the registry: alembic run in-process (no alembic.ini), `upgrade head` on open."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, text

from agentrl_core.store.errors import RegistryError
from agentrl_core.store.urls import redact_url

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x61676E7472  # any constant: serialises concurrent upgrades of one PostgreSQL database


def alembic_config(url: str | None = None):
    """An alembic Config whose script_location is this package's `migrations/` folder."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolation
    return config


def head_revision() -> str:
    """The newest revision this code knows."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RegistryError(f"registry migrations have {len(heads)} heads {heads}; merge them (alembic merge)")
    return heads[0]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to `revision` in one transaction; a database already there is left alone.

    SQLite transactions start with BEGIN IMMEDIATE (see `database.py`) and PostgreSQL takes an
    advisory lock, so two processes opening a fresh database at once migrate it once.
    """
    from alembic import command
    from alembic.util.exc import CommandError

    config = alembic_config()
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except CommandError as err:
        raise RegistryError(
            f"cannot migrate the registry at {redact_url(engine.url.render_as_string(hide_password=False))} "
            f"to {revision!r}: {err}. A database written by a newer agentrl needs that version "
            "(or a fresh registry_url)") from None
