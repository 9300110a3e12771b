"""agentrl's data folder on this machine: imported models, generated games, per-machine decisions, logs."""

from __future__ import annotations

import os
from pathlib import Path


def agentrl_home() -> Path:
    """agentrl's data folder: `$AGENTRL_HOME`, else `~/.cache/agentrl` (not created here)."""
    home = os.environ.get("AGENTRL_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "agentrl"
