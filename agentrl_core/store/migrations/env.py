"""Alembic environment of the run registry: migrates the connection handed over by `migrate.upgrade`.

Used from the command line too (`alembic -x url=...` is not needed: `python -m agentrl_core.store.cli`).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from agentrl_core.store.schema import Base


def _migrate(connection) -> None:
    # SQLite cannot ALTER most things: batch mode copies the table, so later revisions work on both.
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    """Migrate `config.attributes["connection"]`, or a connection to `sqlalchemy.url` when none was given."""
    config = context.config
    if context.is_offline_mode():
        context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata,
                          literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


run()
