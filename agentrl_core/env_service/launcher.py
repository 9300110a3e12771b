"""Launching the env server as a subprocess (web.server_process does the spawning and waiting)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from agentrl_core.env_service.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S
from agentrl_core.web.server_process import ServerProcess, spawn_server

__all__ = ["ServerProcess", "launch_server"]


def launch_server(
    env_names: Sequence[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout: float = 30.0,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    log_level: str = "warning",
    workers: int | None = None,
    worker_starts: int | None = None,
) -> ServerProcess:
    """Start `python -m agentrl_core.env_service.server` as a subprocess and wait until it is healthy.

    The server inherits this process's AGENTRL_SERVER_TOKEN (and AGENTRL_ENV_SERVER_MAX_BODY_MB): inside
    `run_token()`, as a run starts it, it answers only requests bearing that token (web/auth.py).
    """
    args = ["--log-level", log_level, "--max-sessions", str(max_sessions), "--session-ttl", str(session_ttl_s),
            "--env-kwargs", json.dumps(env_kwargs or {})]
    if env_names:
        args += ["--envs", ",".join(env_names)]
    if workers:
        args += ["--workers", str(workers)]
    if worker_starts:
        args += ["--worker-starts", str(worker_starts)]
    return spawn_server("agentrl_core.env_service.server", args, what="env server", host=host, port=port,
                        startup_timeout=startup_timeout)
