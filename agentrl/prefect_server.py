"""The local Prefect API of `agentrl run`: Prefect's temporary server, out of the terminal's signals, dying with it.

Prefect's own ephemeral mode starts the same server as a plain child in the terminal's process
group: a Ctrl-C killed it before the interrupted flow could record its state, and a SIGTERM to the
CLI alone left it running, re-parented to init. This one is started in its own session (a signal
aimed at the terminal's group does not reach it), watches its parent (the kernel's parent-death
signal, and a watchdog thread), is tracked for a second Ctrl-C, and is stopped after the flow.
Same app, same settings, same database (PREFECT_HOME) as ephemeral mode, plus Prefect's own basic
auth: the server requires the run's credential (`run_credential`) on every route but its health
probe, so another local user cannot read or alter the run's state. The credential reaches the server
through its environment and this process's client through Prefect's settings, never a command line.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import httpx

from agentrl_core.system import child_processes
from agentrl_core.web.ports import free_port
from agentrl_core.web.server_process import stop_process

EPHEMERAL_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
"""What Prefect's ephemeral mode sets for its server process."""
SERVER_AUTH_ENV = "PREFECT_SERVER_API_AUTH_STRING"
"""Prefect's server-side basic-auth setting (`server.api.auth_string`): the `user:password` it requires."""
CLIENT_AUTH_ENV = "PREFECT_API_AUTH_STRING"
"""Prefect's client-side setting (`api.auth_string`): the `user:password` its clients send."""


def run_credential() -> str:
    """The `user:password` the run's temporary server requires: PREFECT_API_AUTH_STRING when the user
    set it (so they can reach that server from another shell), else a fresh random one for this run."""
    return os.environ.get(CLIENT_AUTH_ENV) or f"agentrl:{secrets.token_urlsafe(32)}"



def _child_env(credential: str) -> dict[str, str]:
    from prefect.settings import get_current_settings

    settings = get_current_settings().to_environment_variables(exclude_unset=True)
    # the client setting too: the server's own background services call its API as clients
    auth = {SERVER_AUTH_ENV: credential, CLIENT_AUTH_ENV: credential}
    return {**os.environ, **EPHEMERAL_ENV, **{k: str(v) for k, v in settings.items()}, **auth}


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float) -> None:
    """Return once the Prefect server `proc` answers `url`/health; RuntimeError with its log's end if it exits
    or does not answer within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Prefect server exited with code {proc.returncode} while starting; its log ends "
                               f"with:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the Prefect server did not answer {url}/health within {timeout_s:g} s "
                       "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")


def start_server(credential: str, timeout_s: float | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server requiring `credential` (own session, parent watch, tracked); (process, API url)
    once healthy."""
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="agentrl-prefect-")) / "server.log"
    cmd = [sys.executable, "-m", "agentrl.prefect_server", "--port", str(port), "--parent-pid", str(os.getpid())]
    with open(log, "wb") as out:
        proc = child_processes.track(subprocess.Popen(cmd, env=_child_env(credential), stdin=subprocess.DEVNULL,
                                                      stdout=out, stderr=subprocess.STDOUT,
                                                      **child_processes.CHILD_SESSION))
    url = f"http://127.0.0.1:{port}/api"
    try:
        wait_healthy(proc, url, log, timeout_s or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    except BaseException:
        stop_process(proc, 5.0)
        raise
    return proc, url


@contextmanager
def local_prefect_api() -> Iterator[str]:
    """The Prefect API for the block: PREFECT_API_URL when set (a real server, left alone), else a
    temporary server started here, requiring the run's credential, and stopped after (its pending
    logs sent first). Only this process's Prefect settings carry the credential: the run's other
    processes (env servers, Ray workers) never talk to Prefect, so they never hold it."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield str(PREFECT_API_URL.value())
        return
    credential = run_credential()
    proc, url = start_server(credential)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: credential}):
            try:
                yield url
            finally:
                _flush_logs()
    finally:
        stop_process(proc, 5.0)


def _flush_logs() -> None:
    from prefect.logging.handlers import APILogWorker

    try:
        APILogWorker.drain_all(timeout=5)
    except Exception:  # noqa: BLE001 - best effort: the run's outcome is already recorded
        pass


def main(argv: Sequence[str] | None = None) -> None:
    """The server process: die with the parent, then serve Prefect's app (ephemeral settings from the env)."""
    p = argparse.ArgumentParser(prog="python -m agentrl.prefect_server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    args = p.parse_args(argv)
    child_processes.set_parent_death_signal(args.parent_pid, signal.SIGTERM)
    child_processes.watch_parent(args.parent_pid)
    import uvicorn

    uvicorn.run("prefect.server.api.server:create_app", factory=True, host="127.0.0.1", port=args.port,
                log_level="error", lifespan="on")


if __name__ == "__main__":
    main()
