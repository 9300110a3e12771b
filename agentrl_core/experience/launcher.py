"""Launching the experience pool as a subprocess: a handle with url/pid/stop that dies with its parent."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


from agentrl_core.config import RecipeConfig
from agentrl_core.experience.errors import ExperienceStartError
from agentrl_core.secrets import reveal
from agentrl_core.web.auth import run_token
from agentrl_core.web.server_process import ServerProcess, spawn_server


def launch_experience_pool(db_url: str, host: str = "127.0.0.1", port: int | None = None, *,
                           startup_timeout: float = 60.0, log_level: str = "warning") -> ServerProcess:
    """Start `python -m agentrl_core.experience.service` and wait until /health answers.

    Port None or 0 picks a free one. The process stops with `.stop()`, when the handle is
    garbage-collected, or by itself when this (parent) process dies. It inherits this process's
    AGENTRL_SERVER_TOKEN: inside `run_token()` (as a run starts it) it answers only requests bearing
    that token (web/auth.py). The database URL travels in its environment, not on its command line.
    """
    # imported here: the service module pulls in SQLAlchemy, which a training run without the pool never needs
    from agentrl_core.experience.service import DB_ENV

    env = {DB_ENV: db_url, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "false")}
    return spawn_server("agentrl_core.experience.service", ["--log-level", log_level], what="experience pool",
                        host=host, port=port, startup_timeout=startup_timeout, error=ExperienceStartError, env=env)


@contextmanager
def experience_for(cfg: RecipeConfig, db_dir: Path) -> Iterator[RecipeConfig]:
    """`cfg` with experience.url set: as configured, or a pool started here (SQLite in `db_dir`, or
    experience.db_url) and stopped after; `cfg` unchanged when the pool is off. Flows start the
    pool themselves (visible as tasks); this covers library callers of train_grpo. A pool started
    here holds the run's token (`run_token`), which the run's clients and Ray workers send."""
    if not cfg.experience.enabled or cfg.experience.url:
        yield cfg
        return
    db_dir.mkdir(parents=True, exist_ok=True)
    db_url = reveal(cfg.experience.db_url, "experience.db_url") or f"sqlite:///{(db_dir / 'experience.db').resolve()}"
    with run_token(), launch_experience_pool(db_url) as pool:
        yield cfg.model_copy(update={"experience": cfg.experience.model_copy(update={"url": pool.url})})
