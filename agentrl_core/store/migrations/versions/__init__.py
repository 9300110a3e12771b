"""Alembic revision scripts of the run registry, oldest first by `down_revision`."""
