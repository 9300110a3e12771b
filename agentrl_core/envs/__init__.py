"""Environments: the Env contract (`base.py`), the registry, `check_env` (`env_checker.py`), and one package
per environment. The HTTP service that hosts them is `agentrl_core.env_service`.

Importing this package registers the built-in envs; those that need an optional extra (ALFWorld,
ScienceWorld, BabyAI, BFCL) register too and say how to install it when built without it.
"""

from __future__ import annotations

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.env_checker import check_env
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

__all__ = ["Env", "StepResult", "check_env", "env_class", "make", "names", "register"]

from agentrl_core.plugins import load_plugins  # noqa: E402

load_plugins()  # users' own envs, estimators, losses and engines (agentrl_core/plugins.py), once per process
