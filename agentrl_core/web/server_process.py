"""Starting an agentrl server as a subprocess: spawn it, learn its port, wait until it answers, stop it.

Every server (env server, experience pool, OpenAI-compatible server) starts the same way: `python -m <module>
--port-file F --parent-pid P ...` out of the terminal's signals (a Ctrl-C reaches the run, which stops it
after), its output in a log file; the server writes the port it bound to F (port 0 picks a free one), and
the handle polls /health until it answers, or raises with the end of the log if the process dies first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Mapping, Sequence

import httpx

from agentrl_core.system.child_processes import CHILD_SESSION, track
from agentrl_core.errors import ServerStartError

_ROOT = str(Path(__file__).resolve().parents[2])
"""The folder holding agentrl_core: children import it from a checkout that is not installed, too."""


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM (graceful: a server closes its sessions), then SIGKILL if it has not exited within `timeout`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _terminate(proc: subprocess.Popen[bytes], workdir: str, timeout: float = 10.0) -> None:
    """Stop the server (`stop_process`) and remove its work dir."""
    stop_process(proc, timeout)
    shutil.rmtree(workdir, ignore_errors=True)


class ServerProcess:
    """A running server subprocess: `.url`, `.port`, `.pid`, `.stop()`; a context manager."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str, workdir: str) -> None:
        self.proc = track(proc)  # a second Ctrl-C kills it at once (child_processes.kill_tracked)
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

    def wait_ready(self, port_file: Path, requested_port: int, timeout: float, *, what: str = "server",
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


def spawn_server(module: str, args: Sequence[str], *, what: str, host: str = "127.0.0.1", port: int | None = None,
                 startup_timeout: float = 30.0, error: type[Exception] = ServerStartError,
                 env: Mapping[str, str | None] | None = None) -> ServerProcess:
    """Start `python -m module --host H --port P --port-file F --parent-pid <this> *args` and wait until its
    /health answers (`error` with the end of its log if it exits or times out; then it is stopped).

    The child inherits this process's environment (AGENTRL_SERVER_TOKEN included: inside `run_token()` it
    answers only the run's requests), with `env` on top (None removes a variable): secrets travel there,
    never on the command line, which `ps` shows to everyone.
    """
    workdir = tempfile.mkdtemp(prefix=f"agentrl-{module.rsplit('.', 1)[-1]}-")
    port_file = Path(workdir) / "port"
    cmd = [sys.executable, "-m", module, "--host", host, "--port", str(port or 0), "--port-file", str(port_file),
           "--parent-pid", str(os.getpid()), *args]
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p))
    for key, value in (env or {}).items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    with open(Path(workdir) / "server.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                **CHILD_SESSION)  # out of the terminal's signals; it watches its parent
    server = ServerProcess(proc, host, workdir)
    try:
        server.wait_ready(port_file, port or 0, startup_timeout, what=what, error=error)
    except BaseException:
        server.stop()
        raise
    return server
