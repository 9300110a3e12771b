"""Shared fixtures of the environment tests: one real env server per test module that asks for it."""

from __future__ import annotations

from typing import Iterator

import pytest

from agentrl_core.envs import EnvClient, ServerProcess, launch_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A real server (subprocess, 127.0.0.1, free port) hosting every registered env."""
    with launch_server() as srv:
        yield srv


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[EnvClient]:
    with EnvClient(server.url, timeout=10.0, retries=1, backoff=0.0) as c:
        yield c
