"""Environments: the Env contract, the registry, check_env, one HTTP server and one client.

Importing this package registers the built-in envs; those that need an optional extra (ALFWorld,
ScienceWorld, BabyAI, BFCL) register too and say how to install it when built without it. The HTTP pieces
(client, server) load on first use, so importing the package stays light.
"""

from __future__ import annotations

from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.checker import check_env
from agentrl_core.envs.registry import env_class, make, names, register

from agentrl_core.envs import alfworld as _alfworld  # noqa: F401,E402  (registers "alfworld"; needs the alfworld extra)
from agentrl_core.envs import babyai as _babyai  # noqa: F401,E402  (registers "babyai"; needs the babyai extra)
from agentrl_core.envs import bfcl as _bfcl  # noqa: F401,E402  (registers "bfcl"; needs the bfcl extra)
from agentrl_core.envs import countdown as _countdown  # noqa: F401,E402  (registers "countdown")
from agentrl_core.envs import household as _household  # noqa: F401,E402  (registers "household")
from agentrl_core.envs import math_word as _math_word  # noqa: F401,E402  (registers "math")
from agentrl_core.envs import sciworld as _sciworld  # noqa: F401,E402  (registers "sciworld"; needs the sciworld extra)
from agentrl_core.envs import searchqa as _searchqa  # noqa: F401,E402  (registers "searchqa")
from agentrl_core.envs import sql as _sql  # noqa: F401,E402  (registers "sql")
from agentrl_core.envs import textcraft as _textcraft  # noqa: F401,E402  (registers "textcraft")
from agentrl_core.envs import webshop as _webshop  # noqa: F401,E402  (registers "webshop")

_LAZY = {
    "EnvClient": "agentrl_core.envs.client",
    "RemoteEnv": "agentrl_core.envs.client",
    "launch_server": "agentrl_core.envs.launcher",
    "ServerProcess": "agentrl_core.envs.launcher",
    "create_app": "agentrl_core.envs.server",
}

__all__ = [
    "Env", "EnvClient", "RemoteEnv", "ServerProcess", "StepResult", "check_env", "create_app",
    "env_class", "launch_server", "make", "names", "register",
]


def __getattr__(name: str) -> Any:
    """Load the HTTP client/server modules on first access (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentrl_core.envs' has no attribute {name!r}")
