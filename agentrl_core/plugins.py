"""Users' own environments, advantage estimators, policy losses and rollout engines, without forking agentrl.

A plugin is a Python module that registers what it brings when it is imported, with agentrl's own decorators:

    from agentrl_core.envs import Env, register                  # @register on an Env subclass with `name`
    from agentrl_core.algorithms import register_advantage_estimator, register_policy_loss
    from agentrl_core.engine_registry import register_engine

It is named in one of two ways:
- an entry point in the group `agentrl.plugins` of an installed package (its pyproject.toml):
      [project.entry-points."agentrl.plugins"]
      my_plugin = "my_package.agentrl_plugin"
- the environment variable AGENTRL_PLUGINS = "module[,module...]" (modules importable on sys.path; e.g. while
  developing one), read by every process that inherits it.

Every process that builds an environment, an estimator, a loss or an engine imports `agentrl_core.envs`,
`agentrl_core.algorithms` or the engine factory, and each of those loads the plugins once, as its last import:
the CLI and the flows (recipe validation), the env server's processes, Ray's workers (on a cluster, install the
plugin package on every node, as agentrl itself), `check_env`. A plugin that fails to import stops the process
with PluginError naming it and its package, instead of an "unknown environment" later.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from agentrl_core.errors import AgentRLError

ENTRY_POINT_GROUP = "agentrl.plugins"
ENV_VAR = "AGENTRL_PLUGINS"

_state = {"loaded": False, "loading": False}
_modules: list[str] = []


class PluginError(AgentRLError):
    """A plugin named by an entry point or AGENTRL_PLUGINS could not be imported."""


def named_plugins() -> list[tuple[str, str]]:
    """(where it is named, module) of every plugin: entry points of the group first (by package and name), then
    AGENTRL_PLUGINS in its order."""
    found = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.dist.name if e.dist else "", e.name)):
        package = ep.dist.name if ep.dist is not None else "an unnamed package"
        found.append((f"entry point {ep.name!r} of {package}", ep.value.split(":")[0].strip()))
    for module in filter(None, (m.strip() for m in os.environ.get(ENV_VAR, "").split(","))):
        found.append((f"{ENV_VAR}", module))
    return found


def load_plugins() -> list[str]:
    """Import every named plugin once per process (a call while they load, from a plugin's own imports of
    agentrl_core, returns at once); the modules loaded, in order."""
    if _state["loaded"] or _state["loading"]:
        return list(_modules)
    _state["loading"] = True
    try:
        for where, module in named_plugins():
            try:
                importlib.import_module(module)
            except Exception as err:  # noqa: BLE001 - any failure of the user's module is reported as theirs
                raise PluginError(f"the agentrl plugin {module!r} ({where}) failed to import: "
                                  f"{type(err).__name__}: {err}; fix or uninstall it (or unset {ENV_VAR})") from err
            _modules.append(module)
        _state["loaded"] = True
    finally:
        _state["loading"] = False
    return list(_modules)
