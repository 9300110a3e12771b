"""A real env server hosting countdown on 127.0.0.1, shared by the task-set tests and stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentrl_core.env_service import launch_server
from agentrl_core.env_service.client import EnvClient


@pytest.fixture(scope="session")
def countdown_client() -> Iterator[EnvClient]:
    """An EnvClient of a countdown server (train ids 0-4999, test ids 5000-5499)."""
    server = launch_server(["countdown"], host="127.0.0.1")
    try:
        with EnvClient(server.url) as client:
            yield client
    finally:
        server.stop()
