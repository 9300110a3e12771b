"""A cap on the size of request bodies (ASGI middleware): a larger body gets HTTP 413 and is never held in memory.

Without it the server buffers any body whole and parses it (a 1 GB POST costs gigabytes). The cap is
checked twice: against Content-Length before the app runs, and against the bytes actually received
(a chunked body declares no length), where the app reads the body.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from starlette.exceptions import HTTPException

MAX_BODY_BYTES = 8 << 20
"""Largest request body the env server reads: an action is a model's reply (at most a few hundred kB)."""

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _too_large(max_bytes: int, size: str) -> str:
    return f"the request body is {size}, over the limit of {max_bytes} bytes; send a smaller body"


class BodySizeLimit:
    """Wraps an ASGI app so that no request body over `max_bytes` reaches it."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _reject(send, _too_large(self.max_bytes, f"{int(declared)} bytes"))
            return
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:  # the app's HTTPException handler answers 413
                    raise HTTPException(413, _too_large(self.max_bytes, f"over {received} bytes"))
            return message

        return counted


async def _reject(send: Send, detail: str) -> None:
    """A 413 with the server's ErrorResponse body, sent before the app sees the request."""
    body = json.dumps({"error": "RequestTooLargeError", "detail": detail}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
