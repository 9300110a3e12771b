"""Launching the experience pool as a subprocess: a handle with url/pid/stop that dies with its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from agentrl_core.envs.launcher import ServerProcess
from agentrl_core.experience.errors import ExperienceStartError


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_ready(server: ServerProcess, port_file: Path, timeout: float) -> None:
    """Block until /health answers; ExperienceStartError with the log tail if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive:
            raise ExperienceStartError(f"experience pool exited during startup with code {server.proc.returncode}; "
                                       f"its output ends with:\n{server.log_tail()}")
        if server.port is None and port_file.exists():
            server.port = int(port_file.read_text())
        if server.port is not None and _healthy(server.url):
            return
        time.sleep(0.05)
    raise ExperienceStartError(f"experience pool did not answer /health within {timeout:g} s; "
                               f"its output ends with:\n{server.log_tail()}")


def launch_experience_pool(db_url: str, host: str = "127.0.0.1", port: int | None = None, *,
                           startup_timeout: float = 60.0, log_level: str = "warning") -> ServerProcess:
    """Start `python -m agentrl_core.experience.service` and wait until /health answers.

    Port None or 0 picks a free one. The process stops with `.stop()`, when the handle is
    garbage-collected, or by itself when this (parent) process dies.
    """
    workdir = tempfile.mkdtemp(prefix="agentrl-experience-")
    port_file = Path(workdir) / "port"
    cmd = [sys.executable, "-m", "agentrl_core.experience.service", "--host", host, "--port", str(port or 0),
           "--db", db_url, "--port-file", str(port_file), "--log-level", log_level, "--parent-pid", str(os.getpid())]
    root = str(Path(__file__).resolve().parents[2])  # importable from a checkout too
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    child_env.setdefault("HF_HUB_OFFLINE", "1")
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    with open(Path(workdir) / "server.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env)
    server = ServerProcess(proc, host, workdir)
    try:
        _wait_ready(server, port_file, startup_timeout)
    except BaseException:
        server.stop()
        raise
    return server
