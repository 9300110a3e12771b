"""Bounded request bodies for agentrl's HTTP servers: one ASGI middleware, a limit per server.

A server without a cap reads any body whole and parses it (a 300 MB POST cost the OpenAI server
~900 MB of memory), so every agentrl server wraps its app in `BodySizeLimit` with a `BodyLimit`
sized for its own largest legitimate request. The cap is checked as the bytes arrive:

- a declared Content-Length over the cap is answered 413 before the app runs (nothing is read);
- a body without one (chunked) is counted where the app reads it; the read that crosses the cap
  raises a 413 `HTTPException`, which the app's handler renders in its own error shape.

Either way the 413 says the limit and how to raise it, and the connection is closed afterwards,
so the server never drains the rest of an oversized upload (clients still read the 413: httpx and
other HTTP/1.1 clients read the response after the server stops reading).

A server's limit is, first to last: its `--max-body-mb` argument, its environment variable
(`BodyLimit.env_var`, inherited by servers a run starts), its built-in default.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from starlette.exceptions import HTTPException

from agentrl_core.errors import ConfigError

MIB = 1 << 20

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorBody = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class BodyLimit:
    """One server's cap on request bodies: `max_bytes`, raised with --max-body-mb or `env_var`."""

    max_bytes: int
    env_var: str

    @classmethod
    def resolve(cls, default_bytes: int, env_var: str, flag_mb: float | None = None) -> "BodyLimit":
        """The limit in force: `flag_mb` (--max-body-mb) if given, else $`env_var` (MiB), else the default."""
        if flag_mb is not None:
            return cls(_mib_to_bytes(flag_mb, "--max-body-mb"), env_var)
        text = os.environ.get(env_var, "").strip()
        return cls(_mib_to_bytes(_number(text, env_var), env_var) if text else default_bytes, env_var)

    def too_large(self, size: str) -> str:
        """What a 413 says: the size, the limit, and how to raise it."""
        return (f"the request body is {size}, over this server's limit of {_mib(self.max_bytes)} "
                f"({self.max_bytes} bytes); send a smaller body, or start the server with a larger --max-body-mb "
                f"(or {self.env_var}=<MiB> in its environment)")


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{where} must be a number of MiB (e.g. 64), got {text!r}") from None


def _mib_to_bytes(mib: float, where: str) -> int:
    if not mib > 0:
        raise ConfigError(f"{where} must be a positive number of MiB, got {mib!r}")
    return int(mib * MIB)


def _mib(n: int) -> str:
    return f"{n / MIB:g} MiB"


class BodySizeLimit:
    """ASGI middleware: no request body over `limit.max_bytes` reaches (or is buffered for) `app`.

    `error_body(message)` builds the early 413's JSON body in the app's own error shape.
    """

    def __init__(self, app: ASGIApp, *, limit: BodyLimit, error_body: ErrorBody) -> None:
        self.app, self.limit, self.error_body = app, limit, error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit.max_bytes:
            await _reject(send, self.error_body(self.limit.too_large(f"{int(declared)} bytes")))
            return
        await _Counted(self.app, self.limit, self.error_body).run(scope, receive, send)


class _Counted:
    """One request whose body is counted as it is read; past the limit it ends in a 413."""

    def __init__(self, app: ASGIApp, limit: BodyLimit, error_body: ErrorBody) -> None:
        self.app, self.limit, self.error_body = app, limit, error_body
        self.received, self.tripped, self.started = 0, False, False

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
                if self.received > self.limit.max_bytes:
                    self.tripped = True  # the app's HTTPException handler answers 413 in its own shape
                    raise HTTPException(413, self.limit.too_large(f"over {self.received} bytes"))
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.started = True
                if self.tripped:  # close rather than drain the rest of an oversized upload
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except HTTPException:
            if not (self.tripped and not self.started):
                raise
            # an app without an HTTPException handler: answer the 413 here
            await _reject(send, self.error_body(self.limit.too_large(f"over {self.received} bytes")))


async def _reject(send: Send, body: dict[str, Any]) -> None:
    """A 413 sent before the app sees the request; the connection is closed after it."""
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})
