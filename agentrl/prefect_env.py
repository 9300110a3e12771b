"""Prefect settings for local runs: offline, and a Prefect home of agentrl's own."""

from __future__ import annotations

import os

from agentrl_core.system.home import agentrl_home

STARTUP_TIMEOUT_S = 90
"""Seconds a temporary Prefect server may take to answer (Prefect's default of 20 s is too short when several
start at once, or on a busy machine)."""


def configure_local_prefect() -> None:
    """Set (unless the user already did) the environment Prefect reads at import time.

    Without PREFECT_API_URL a flow starts a temporary server; giving it its own PREFECT_HOME
    and a longer start-up timeout keeps concurrent local runs from colliding (Prefect's default of 20 s
    is too short when several start at once).
    """
    defaults = {
        "PREFECT_HOME": str(agentrl_home() / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_UI_V2_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(STARTUP_TIMEOUT_S),
        "PREFECT_LOGGING_LEVEL": "INFO",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
