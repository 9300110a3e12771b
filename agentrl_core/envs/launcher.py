"""Launching the env server as a subprocess: a handle that finds its port, waits, and stops it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

import httpx

from agentrl_core.envs.errors import ServerStartError
from agentrl_core.lifetime import CHILD_SESSION, track
from agentrl_core.envs.server import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S


def _terminate(proc: subprocess.Popen[bytes], workdir: str, timeout: float = 10.0) -> None:
    """SIGTERM (graceful: sessions get closed), then SIGKILL if it hangs; remove the work dir."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(workdir, ignore_errors=True)


class ServerProcess:
    """A running env server subprocess: `.url`, `.port`, `.pid`, `.stop()`; a context manager."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str, workdir: str) -> None:
        self.proc = track(proc)  # a second Ctrl-C kills it at once (lifetime.kill_tracked)
        self.host = host
        self.port: int | None = None
        self.workdir = workdir
        self.log_path = Path(workdir) / "server.log"
        # stops the server even if the handle is dropped or the interpreter exits
        self._finalizer = weakref.finalize(self, _terminate, proc, workdir)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's stdout/stderr."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (terminate, wait, kill if needed). Idempotent."""
        self._finalizer()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerProcess(url={self.url!r}, pid={self.pid}, alive={self.alive})"

    def wait_ready(self, port_file: Path, requested_port: int, timeout: float, *, what: str = "env server",
                   error: type[Exception] = ServerStartError) -> None:
        """Block until /health answers; `error` with the log tail if it dies or times out.

        The server writes its port to `port_file` once bound (port 0 picks a free one); any of our
        servers (env server, experience pool, OpenAI-compatible model server) starts this way.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise error(
                    f"{what} (port {requested_port or 'auto'}) exited during startup with code "
                    f"{self.proc.returncode}; its output ends with:\n{self.log_tail()}"
                )
            if self.port is None and port_file.exists():
                self.port = int(port_file.read_text())
            if self.port is not None and _healthy(self.url):
                return
            time.sleep(0.05)
        raise error(f"{what} did not answer /health within {timeout:g} s; its output ends with:\n{self.log_tail()}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def launch_server(
    env_names: Sequence[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout: float = 30.0,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    log_level: str = "warning",
    workers: int | None = None,
) -> ServerProcess:
    """Start `python -m agentrl_core.envs.server` as a subprocess and wait until it is healthy.

    The server inherits this process's AGENTRL_SERVER_TOKEN (and AGENTRL_ENV_SERVER_MAX_BODY_MB): inside
    `run_token()`, as a run starts it, it answers only requests bearing that token (server_auth.py).
    """
    workdir = tempfile.mkdtemp(prefix="agentrl-envserver-")
    port_file = Path(workdir) / "port"
    cmd = [
        sys.executable, "-m", "agentrl_core.envs.server", "--host", host, "--port", str(port or 0),
        "--port-file", str(port_file), "--log-level", log_level, "--max-sessions", str(max_sessions),
        "--session-ttl", str(session_ttl_s), "--env-kwargs", json.dumps(env_kwargs or {}),
        "--parent-pid", str(os.getpid()),
    ]
    if env_names:
        cmd += ["--envs", ",".join(env_names)]
    if workers:
        cmd += ["--workers", str(workers)]
    # the child must import this package even when it is not installed (e.g. run from a checkout)
    root = str(Path(__file__).resolve().parents[2])
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    with open(Path(workdir) / "server.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                **CHILD_SESSION)  # a terminal's Ctrl-C reaches the run, which stops it after
    server = ServerProcess(proc, host, workdir)
    try:
        server.wait_ready(port_file, port or 0, startup_timeout)
    except BaseException:
        server.stop()
        raise
    return server
