"""Alembic migrations of the run registry (run programmatically by `agentrl_core.store.migrate`)."""
