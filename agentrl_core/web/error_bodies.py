"""JSON error bodies, and the exception handlers that give every failure of a server a real status code.

The env server and the experience pool answer `{"error": <kind>, "detail": <message>}` (`error_body`); the
OpenAI-compatible server answers OpenAI's `{"error": {"message", "type", "param", "code"}}`. Each server
says how it words a kind (`Respond`) and which kinds it uses (`ErrorKinds`); `install_error_handlers` maps
its own exceptions, a malformed request (422; OpenAI: 400), an HTTP error (404, 413, ...) and anything
unexpected (500, logged with its traceback) onto them. Never a 200 with an error inside.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

Respond = Callable[[int, str, str, "Mapping[str, str] | None"], JSONResponse]
"""(status, kind, message, headers) -> the server's JSON response."""
Handler = Callable[[Request, Exception], Awaitable[JSONResponse]]


def error_body(kind: str, detail: str) -> dict[str, str]:
    """`{"error": kind, "detail": detail}`: the error body of the env server and the experience pool."""
    return {"error": kind, "detail": detail}


def respond_with_error_body(status: int, kind: str, detail: str,
                            headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A `Respond` that answers `error_body(kind, detail)`."""
    return JSONResponse(error_body(kind, detail), status_code=status, headers=dict(headers) if headers else None)


def validation_message(exc: RequestValidationError, skip: Sequence[str] = ()) -> str:
    """"loc.path: what is wrong; ..." for every field pydantic refused (`skip`: location parts left out)."""
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ()) if p not in skip)}: {e.get('msg', '')}"
             for e in exc.errors()]
    return "; ".join(parts) or "invalid request"


@dataclass(frozen=True)
class ErrorKinds:
    """The kinds a server names its generic failures with."""

    invalid: str
    """a request that does not match its schema"""
    unexpected: str
    """an exception nothing else handled (HTTP 500)"""
    http: Mapping[int, str] = field(default_factory=dict)
    """an HTTP error by status, e.g. {404: "NotFound", 413: "RequestTooLarge"}"""
    http_other: str = "HTTPError"
    invalid_status: int = 422


def install_error_handlers(app: FastAPI, respond: Respond, kinds: ErrorKinds, *, log: logging.Logger,
                           own: Sequence[tuple[type[Exception], Handler]] = ()) -> None:
    """Give `app` a handler per failure: the server's `own` exception types first, then a malformed request,
    an HTTP error (its headers kept: Retry-After, ...) and, last, anything unexpected."""

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return respond(kinds.invalid_status, kinds.invalid, validation_message(exc), None)

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = kinds.http.get(exc.status_code, kinds.http_other)
        return respond(exc.status_code, kind, str(exc.detail), getattr(exc, "headers", None))

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected server error")
        return respond(500, kinds.unexpected, f"{type(exc).__name__}: {exc}", None)

    handled = {t for t, _ in own}
    for exc_type, handler in own:
        app.add_exception_handler(exc_type, handler)
    if RequestValidationError not in handled:
        app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
