"""The environment service: one HTTP server hosting every registered env, and its client.

`server.py` (the FastAPI app and its entry point), `sessions.py` (session store, TTL, caps), `pool.py` and
`worker.py` (env sessions in worker processes), `frames.py` (the worker socket's framing), `env_api.py`
(request and response types), `agentgym.py` (AgentGym's two URL conventions), `server_metrics.py`
(/metrics), `launcher.py` (start it as a subprocess), `client.py` (EnvClient, RemoteEnv). The HTTP pieces
every agentrl server shares (app runner, auth, body limit) are `agentrl_core.web`. Names load on first
use, so importing the package stays light.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "EnvClient": "agentrl_core.env_service.client",
    "RemoteEnv": "agentrl_core.env_service.client",
    "launch_server": "agentrl_core.env_service.launcher",
    "ServerProcess": "agentrl_core.web.server_process",
    "create_app": "agentrl_core.env_service.server",
}

__all__ = ["EnvClient", "RemoteEnv", "ServerProcess", "create_app", "launch_server"]


def __getattr__(name: str) -> Any:
    """Load the client/server modules on first access (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentrl_core.env_service' has no attribute {name!r}")
