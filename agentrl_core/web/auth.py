"""Bearer tokens of agentrl's own servers: a server with a token answers only those who send it.

Every server agentrl starts (env server, experience pool, OpenAI-compatible model server) reads its
token from `AGENTRL_SERVER_TOKEN`, and every agentrl client sends that variable's value as
`Authorization: Bearer <token>`. A run (the flows, `agentrl run`, `agentrl eval`, `train_grpo`'s own
experience pool) makes one with `run_token` before it starts servers, so its servers, its clients,
its subprocesses and its Ray workers share it; nobody types it.

The rule is one, whatever the address:

- **A server with a token requires it** on every route but `/health`, on loopback too: on a shared
  machine any local user can reach 127.0.0.1, so a run's servers answer only the run. A request
  without the header, or with another token, gets a 401 saying what is missing and how to fix it
  (never the token). The OpenAI server also accepts its API key (`AGENTRL_OPENAI_API_KEY`).
- **A server without a token is open**, and says so at start. That is allowed on loopback only:
  the standalone `agentrl serve` for header-less AgentGym clients. Beyond loopback, starting
  without a token is refused (`check_bind`) unless the caller allows it explicitly
  (`--allow-unauthenticated`), which logs a warning.

So the token, not a flag, decides: there is no way to start a server that holds a token and still
serves strangers, and exporting `AGENTRL_SERVER_TOKEN` is how a standalone server is made private.

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
from typing import Any, Callable, Iterator, Sequence

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


def token_matches(header: str, tokens: Sequence[str]) -> bool:
    """True when `header` is 'Bearer <t>' for one of `tokens` (each compared in constant time)."""
    scheme, _, given = header.partition(" ")
    sent = given.strip().encode()
    # every token is compared (no early exit), so the time taken does not say which one was close
    matches = [hmac.compare_digest(sent, t.encode()) for t in tokens]
    return scheme.lower() == "bearer" and any(matches)


RUN_TOKEN = f"the token the server was started with (its {TOKEN_ENV}; a run's servers hold the run's token)"
"""What a server accepts, as its 401 and start banner say it (the OpenAI server adds its API key)."""


def unauthorized_message(given: bool, accepted: str = RUN_TOKEN) -> str:
    """What a 401 says: what is wrong and how to fix it (never the token)."""
    problem = "the bearer token sent is not this server's" if given else \
        "this server requires a bearer token and the request has none"
    return (f"{problem}: send the header 'Authorization: Bearer <token>' with {accepted}. agentrl clients send "
            f"${TOKEN_ENV} automatically, so run them with {TOKEN_ENV} set to the server's value")


def auth_banner(host: str, required: bool, accepted: str = RUN_TOKEN) -> str:
    """How clients authenticate, said when a server starts (never showing the token)."""
    if required:
        return (f"  bearer token required on every route but /health: clients send 'Authorization: Bearer <token>' "
                f"with {accepted}; header-less clients (e.g. AgentGym's) are refused (to serve them on loopback, "
                f"start it without {TOKEN_ENV})")
    if not is_loopback(host):
        return ("  WARNING: no bearer token: anyone who can reach this address may use it (--allow-unauthenticated); "
                f"set {TOKEN_ENV} to require one")
    return (f"  no bearer token: open to every user and process on this machine (for header-less clients such as "
            f"AgentGym's); to require one, start it with {TOKEN_ENV} set and give clients the same variable")


ErrorBody = Callable[[str], dict[str, Any]]


class BearerAuth:
    """ASGI middleware: every route but `open_paths` needs 'Authorization: Bearer <t>' for a t in `tokens`.

    `error_body(message)` builds the 401's JSON body in the app's own error shape; `accepted` says
    in that message which token to send.
    """

    def __init__(self, app: Any, *, tokens: Sequence[str], error_body: ErrorBody, accepted: str = RUN_TOKEN,
                 open_paths: frozenset[str] = OPEN_PATHS) -> None:
        if not tokens or not all(tokens):
            raise ValueError("BearerAuth needs at least one non-empty token")
        self.app, self.tokens, self.error_body, self.open_paths = app, tuple(tokens), error_body, open_paths
        self.accepted = accepted

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if header is not None and token_matches(header, self.tokens):
            await self.app(scope, receive, send)
            return
        await _send_401(send, self.error_body(unauthorized_message(header is not None, self.accepted)))


async def _send_401(send: Any, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"www-authenticate", b'Bearer realm="agentrl"')]})
    await send({"type": "http.response.body", "body": payload})


def server_tokens(*extra: str | None) -> tuple[str, ...]:
    """The tokens a server accepts: AGENTRL_SERVER_TOKEN (when set) and any `extra` ones given (e.g. an API key)."""
    return tuple(dict.fromkeys(t for t in (server_token(), *extra) if t))


def protect(app: Any, host: str, *, error_body: ErrorBody, tokens: Sequence[str] | None = None,
            allow_unauthenticated: bool = False, what: str = "server", accepted: str = RUN_TOKEN) -> bool:
    """Check the bind (`check_bind`) and, when there are `tokens` (default: `server_tokens()`), add
    `BearerAuth` to a FastAPI/Starlette `app` about to serve on `host`. True when a token is required."""
    tokens = server_tokens() if tokens is None else tuple(t for t in tokens if t)
    check_bind(host, tokens[0] if tokens else None, allow_unauthenticated=allow_unauthenticated, what=what)
    if tokens:
        app.add_middleware(BearerAuth, tokens=tokens, error_body=error_body, accepted=accepted)
    return bool(tokens)
