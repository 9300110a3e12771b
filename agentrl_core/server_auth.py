"""Bearer tokens of agentrl's own servers: required beyond loopback, checked in constant time.

Every server agentrl starts (env server, experience pool, OpenAI-compatible model server) reads its
token from `AGENTRL_SERVER_TOKEN`, and every agentrl client sends that variable's value as
`Authorization: Bearer <token>`. A flow run generates one (`run_token`) before it starts servers,
so its subprocesses and Ray workers inherit it; nobody types it.

- Bound to loopback (127.0.0.1, ::1, localhost): requests without a header are served (AgentGym
  clients that cannot send one keep working); a header with a wrong token is refused.
- Bound to anything else: every request but `/health` needs the token (401 otherwise). Starting
  there without a token is refused (`check_bind`) unless the caller allows it explicitly
  (`--allow-unauthenticated`), which logs a warning.

The token is never logged, never put on a command line, never in a URL.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import secrets
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from agentrl_core.errors import AgentRLError

log = logging.getLogger(__name__)

TOKEN_ENV = "AGENTRL_SERVER_TOKEN"
"""The environment variable holding the bearer token of agentrl's servers and clients."""
OPEN_PATHS = frozenset({"/health"})
"""Paths answered without a token (liveness probes; they reveal nothing)."""


class UnauthenticatedBindError(AgentRLError):
    """A server was asked to listen beyond loopback without a token."""


def is_loopback(host: str) -> bool:
    """True when `host` (a bind address) is reachable from this machine only."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it resolves beyond this machine


def server_token() -> str | None:
    """The token from AGENTRL_SERVER_TOKEN (None when unset or empty)."""
    return os.environ.get(TOKEN_ENV) or None


def auth_headers() -> dict[str, str]:
    """The header agentrl's clients send: the bearer token when one is set, else nothing."""
    token = server_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def generate_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


@contextmanager
def run_token() -> Iterator[str]:
    """The run's token for the block: AGENTRL_SERVER_TOKEN if set, else a fresh one put there (so
    servers, clients, subprocesses and Ray workers started inside share it), removed after."""
    existing = server_token()
    if existing:
        yield existing
        return
    token = os.environ[TOKEN_ENV] = generate_token()
    try:
        yield token
    finally:
        if os.environ.get(TOKEN_ENV) == token:
            del os.environ[TOKEN_ENV]


def check_bind(host: str, token: str | None, *, allow_unauthenticated: bool = False, what: str = "server") -> None:
    """Refuse to listen on a non-loopback `host` without a token (unless explicitly allowed: warn)."""
    if token or is_loopback(host):
        return
    if allow_unauthenticated:
        log.warning("%s on %s accepts requests from anyone who can reach it (--allow-unauthenticated); set %s "
                    "to require a bearer token", what, host, TOKEN_ENV)
        return
    raise UnauthenticatedBindError(
        f"refusing to start the {what} on {host} without a token: it would answer anyone on the network. Set "
        f"{TOKEN_ENV} (e.g. export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')) "
        f"and give clients the same variable (agentrl clients send it as 'Authorization: Bearer <token>'); or bind "
        f"127.0.0.1; or pass --allow-unauthenticated if the network is trusted")


def token_matches(header: str, token: str) -> bool:
    """True when `header` is 'Bearer <token>' (constant-time comparison)."""
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def unauthorized_message(host: str, given: bool) -> str:
    """What a 401 says: what is wrong and how to fix it (never the token)."""
    problem = "the bearer token sent is not this server's" if given else \
        f"this server listens on {host} (beyond loopback) and needs a bearer token"
    return (f"{problem}: send the header 'Authorization: Bearer <token>' with the token the server was started "
            f"with (its {TOKEN_ENV}); agentrl clients send ${TOKEN_ENV} automatically, so set it to the same value")


ErrorBody = Callable[[str], dict[str, Any]]


class BearerAuth:
    """ASGI middleware enforcing the rules in the module docstring for an app bound to `host`.

    `error_body(message)` builds the 401's JSON body in the app's own error shape.
    """

    def __init__(self, app: Any, *, host: str, token: str | None, error_body: ErrorBody,
                 open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app, self.token, self.error_body, self.open_paths = app, token, error_body, open_paths
        self.host = host
        self.required = not is_loopback(host) and token is not None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths or self.token is None:
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if header is None and not self.required:
            await self.app(scope, receive, send)  # loopback: header-less (AgentGym) clients are served
            return
        if header is not None and token_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        await _send_401(send, self.error_body(unauthorized_message(self.host, header is not None)))


async def _send_401(send: Any, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"www-authenticate", b'Bearer realm="agentrl"')]})
    await send({"type": "http.response.body", "body": payload})


def protect(app: Any, host: str, *, error_body: ErrorBody, token: str | None = None,
            allow_unauthenticated: bool = False, what: str = "server") -> None:
    """Check the bind (`check_bind`) and add `BearerAuth` to a FastAPI/Starlette `app` about to serve on
    `host`; `token` defaults to AGENTRL_SERVER_TOKEN."""
    token = token if token is not None else server_token()
    check_bind(host, token, allow_unauthenticated=allow_unauthenticated, what=what)
    app.add_middleware(BearerAuth, host=host, token=token, error_body=error_body)
