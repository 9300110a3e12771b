"""Tasks that start and stop the environment server for a flow run."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator

from prefect import get_run_logger, task

from agentrl_core.config import EnvConfig
from agentrl_core.env_service import ServerProcess, launch_server
from agentrl_core.secrets import reveal
from agentrl_core.web.auth import run_token
from tasks.retry import retry_unless_disk_full

_SERVERS: dict[int, ServerProcess] = {}


@task(name="start-env-server", retries=2, retry_delay_seconds=2, timeout_seconds=120,
      retry_condition_fn=retry_unless_disk_full)
def start_env_server(env: EnvConfig) -> dict[str, object]:
    """Start the env server on env.host (127.0.0.1 by default); returns its url and pid."""
    server = launch_server([env.name], host=env.host, port=env.port, env_kwargs={env.name: env.kwargs})
    _SERVERS[server.pid] = server
    get_run_logger().info("environment server for %s at %s (pid %d)", env.name, server.url, server.pid)
    return {"url": server.url, "pid": server.pid}


@task(name="stop-env-server", retries=0)
def stop_env_server(pid: int) -> None:
    """Stop the server this process started (by its pid)."""
    server = _SERVERS.pop(pid, None)
    if server is not None:
        server.stop()
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


@contextmanager
def env_server(env: EnvConfig) -> Iterator[str]:
    """The url of a running server for the flow's body: an existing one (env.url) or one started and
    always stopped here, also when the body fails. A hard kill of the flow process is covered by
    the server itself, which exits when its parent process dies."""
    with run_token():  # the run's bearer token (web/auth.py): its servers, clients and workers share it
        if env.url:
            yield reveal(env.url, "env.url")
            return
        info = start_env_server(env)
        try:
            yield str(info["url"])
        finally:
            stop_env_server(int(info["pid"]))


@task(name="start-env-servers", retries=2, retry_delay_seconds=2, timeout_seconds=180,
      retry_condition_fn=retry_unless_disk_full)
def start_env_servers(names: list[str]) -> dict[str, object]:
    """Start one env server on 127.0.0.1 serving every environment in `names`; returns its url and pid."""
    server = launch_server(list(names), host="127.0.0.1")
    _SERVERS[server.pid] = server
    get_run_logger().info("environment server for %s at %s (pid %d)", ", ".join(names), server.url, server.pid)
    return {"url": server.url, "pid": server.pid}


@contextmanager
def env_servers(names: list[str]) -> Iterator[str]:
    """The url of a server for all of `names` for the flow's body, always stopped after."""
    with run_token():  # the run's bearer token, shared by its servers, clients and workers
        info = start_env_servers(names)
        try:
            yield str(info["url"])
        finally:
            stop_env_server(int(info["pid"]))
