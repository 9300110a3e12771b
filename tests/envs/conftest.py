"""Shared fixtures of the environment tests: one real env server per test module that asks for it."""

from __future__ import annotations

from typing import Iterator

import pytest

from agentrl_core.env_service import EnvClient, ServerProcess, launch_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A real server (subprocess, 127.0.0.1, free port) hosting every registered env."""
    with launch_server() as srv:
        yield srv


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[EnvClient]:
    with EnvClient(server.url, timeout=10.0, retries=1, backoff=0.0) as c:
        yield c


def every_env() -> list[object]:
    """Every registered env name as a pytest param; those whose extra is missing are skipped, saying why."""
    from agentrl_core.envs import env_class, names

    params = []
    for name in names():
        missing = env_class(name).missing_extra()
        marks = [pytest.mark.skip(reason=missing)] if missing else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params
