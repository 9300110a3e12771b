"""Running one agentrl server process: bind, announce, serve with uvicorn; its arguments; exit with its launcher.

Every server (env server, experience pool, OpenAI-compatible server) is a `python -m ...` process whose
`main` parses `add_server_args`, calls `init_server_process`, builds its FastAPI app and hands it to `run_app`.
Its launcher (`server_process.spawn_server`) reads the bound port from `--port-file`.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from agentrl_core.errors import ServerStartError
from agentrl_core.web.auth import RUN_TOKEN, TOKEN_ENV, auth_banner, protect
from agentrl_core.web.error_bodies import error_body

KEEP_ALIVE_S = 120
"""Seconds an idle keep-alive connection stays open: longer than a slow LLM turn, so clients' pooled
connections are not closed under them."""


def add_server_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments every agentrl server process takes: bind address, port, log level, and the two
    its launcher passes (where to write the bound port, which parent to die with)."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--port-file", default=None, help=argparse.SUPPRESS)  # the launcher learns the port here
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)  # exit when it dies
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help=f"serve beyond loopback without a bearer token (default: refused unless {TOKEN_ENV} is set)")
    p.add_argument("--max-body-mb", type=float, default=None,
                   help="largest request body in MiB, larger ones get HTTP 413 (default: the server's own limit, or "
                        "its AGENTRL_..._MAX_BODY_MB environment variable)")
    return p


def init_server_process(args: argparse.Namespace) -> None:
    """A server process's start: exit with the launcher (when given) and log at the asked level."""
    if args.parent_pid:
        exit_with_parent(args.parent_pid)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on (host, port); port 0 picks a free one. Clear error if taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every response waits ~40 ms for a delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServerStartError(
                f"port {port} on {host} is already in use; pick another --port, or 0 for a free one"
            ) from None
        raise ServerStartError(f"cannot bind {host}:{port}: {exc}") from None
    return sock


def unauthorized_body(message: str) -> dict[str, str]:
    """The 401 body of the env server and the experience pool: {"error": "Unauthorized", "detail": ...}."""
    return error_body("Unauthorized", message)


def run_app(app: Any, host: str, port: int | None, *, log_level: str, port_file: str | None, banner: str,
            tokens: Sequence[str] | None = None, allow_unauthenticated: bool = False,
            error_body: Callable[[str], dict[str, Any]] = unauthorized_body, accepted: str = RUN_TOKEN) -> None:
    """Bind (host, port or a free one), publish the port, announce `banner` (formatted with host:port)
    and how clients authenticate on stderr, and serve `app` with uvicorn until SIGINT/SIGTERM. With
    `tokens` (default: AGENTRL_SERVER_TOKEN when set) every route but /health requires one of them
    (web/auth.py); `error_body` shapes the 401, `accepted` says in it which token to send."""
    import uvicorn

    required = protect(app, host, tokens=tokens, allow_unauthenticated=allow_unauthenticated, error_body=error_body,
                       what=banner.split(" on ")[0], accepted=accepted)
    sock = bind_socket(host, port or 0)
    bound = sock.getsockname()[1]
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(bound))
        tmp.replace(port_file)  # atomic: the launcher never reads half a number
    print(banner.format(f"{host}:{bound}"), file=sys.stderr, flush=True)
    print(auth_banner(host, required, accepted), file=sys.stderr, flush=True)
    # keep-alive longer than a slow LLM turn, so clients' pooled connections are not closed under them
    config = uvicorn.Config(
        app, host=host, port=bound, log_level=log_level, access_log=False, timeout_keep_alive=KEEP_ALIVE_S
    )
    uvicorn.Server(config).run(sockets=[sock])


def exit_with_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """Stop this server (gracefully, SIGTERM) when the process that launched it is gone.

    A flow run killed hard (SIGKILL, a cancelled deployment) never reaches its `finally`; the
    server notices it was re-parented and shuts itself down instead of leaking.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
