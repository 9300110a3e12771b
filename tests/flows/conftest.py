"""Prefect fixtures: one test harness (temporary server and database) for the session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def tiny_overrides(model_path, root) -> list[str]:
    """A pipeline small enough for CI: a 2-layer model, 4 demos, 1 GRPO step, 2 test tasks."""
    return [f"model.name={model_path}", f"run.root={root}", "run.name=tiny", "env.test_tasks=2", "env.max_turns=8",
            "sft.demos=4", "sft.epochs=1", "sft.batch_size=4", "trainer.steps=1", "rollout.tasks_per_step=2",
            "rollout.group_size=2", "rollout.sampling.max_new_tokens=4", "eval.sampling.max_new_tokens=4",
            "model.compute_dtype=float32"]


from tests.s3_fixtures import s3_endpoint  # noqa: E402,F401  (moto's S3 server, shared with the storage tests)
from tests.store.conftest import postgres_url  # noqa: E402,F401  (a real PostgreSQL, shared with the registry tests)
