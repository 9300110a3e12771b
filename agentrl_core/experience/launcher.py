"""Launching the experience pool as a subprocess: a handle with url/pid/stop that dies with its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


from agentrl_core.config import RecipeConfig
from agentrl_core.envs.launcher import ServerProcess
from agentrl_core.experience.errors import ExperienceStartError
from agentrl_core.experience.service import DB_ENV
from agentrl_core.lifetime import CHILD_SESSION
from agentrl_core.secrets import reveal
from agentrl_core.server_auth import run_token


def launch_experience_pool(db_url: str, host: str = "127.0.0.1", port: int | None = None, *,
                           startup_timeout: float = 60.0, log_level: str = "warning") -> ServerProcess:
    """Start `python -m agentrl_core.experience.service` and wait until /health answers.

    Port None or 0 picks a free one. The process stops with `.stop()`, when the handle is
    garbage-collected, or by itself when this (parent) process dies. It inherits this process's
    AGENTRL_SERVER_TOKEN: inside `run_token()` (as a run starts it) it answers only requests bearing
    that token (server_auth.py).
    """
    workdir = tempfile.mkdtemp(prefix="agentrl-experience-")
    port_file = Path(workdir) / "port"
    cmd = [sys.executable, "-m", "agentrl_core.experience.service", "--host", host, "--port", str(port or 0),
           "--port-file", str(port_file), "--log-level", log_level, "--parent-pid", str(os.getpid())]
    root = str(Path(__file__).resolve().parents[2])  # importable from a checkout too
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    child_env[DB_ENV] = db_url  # in the environment, not on the command line (`ps` shows that to everyone)
    child_env.setdefault("HF_HUB_OFFLINE", "1")
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    with open(Path(workdir) / "server.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                **CHILD_SESSION)  # out of the terminal's signals; it watches its parent
    server = ServerProcess(proc, host, workdir)
    try:
        server.wait_ready(port_file, port or 0, startup_timeout, what="experience pool", error=ExperienceStartError)
    except BaseException:
        server.stop()
        raise
    return server


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
