"""Optional dependencies of environments: which extra installs them, and the error when absent.

Heavy engines (ALFWorld, ScienceWorld, minigrid, bfcl-eval) are imported only when an env is
built, so `import agentrl_core.envs` stays light and registers every env. Building one whose
modules are missing raises MissingExtraError naming the command that installs them.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from agentrl_core.errors import MissingExtraError

# Extras that pip cannot express (installed with --no-deps): name -> the install command.
SPECIAL_INSTALL = {
    "bfcl": "pip install mpmath && pip install --no-deps 'bfcl-eval==2026.3.23'",
}


def install_command(extra: str) -> str:
    """The command that installs `extra` into the current environment."""
    return SPECIAL_INSTALL.get(extra, f"pip install 'agentrl[{extra}]'")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extra_message(env_name: str, extra: str | None, requires: tuple[str, ...]) -> str | None:
    """None when all of `requires` import; otherwise what is missing and how to install it."""
    missing = [m for m in requires if not _importable(m)]
    if not missing:
        return None
    how = install_command(extra) if extra else f"pip install {' '.join(missing)}"
    return f"environment {env_name!r} needs {', '.join(missing)}, which is not installed; install it with: {how}"


def require_extra(cls: Any) -> None:
    """Raise MissingExtraError when the env class `cls` lacks one of its `requires` modules."""
    requires = tuple(getattr(cls, "requires", ()))
    if not requires:
        return
    message = missing_extra_message(getattr(cls, "name", cls.__name__), getattr(cls, "extra", None), requires)
    if message:
        raise MissingExtraError(message)
