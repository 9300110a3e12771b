"""Environment errors raised at the HTTP boundary and by the conformance checker."""

from __future__ import annotations

from agentrl_core.errors import EnvError, ResetNeededError, TaskNotFoundError, UnknownEnvError

__all__ = [
    "EnvCheckError",
    "EnvError",
    "EnvServerError",
    "EnvServerUnavailable",
    "InvalidRequestError",
    "ResetNeededError",
    "ServerStartError",
    "SessionNotFoundError",
    "TaskNotFoundError",
    "TooManySessionsError",
    "UnknownEnvError",
]


class EnvServerUnavailable(EnvError, ConnectionError):
    """The environment server cannot be reached, or kept failing transiently until retries ran out."""


class TooManySessionsError(EnvServerUnavailable):
    """The server is at its session limit (HTTP 429): close sessions or retry later."""


class SessionNotFoundError(EnvError, LookupError):
    """No live session has that id: it was never created, was closed, or expired while idle."""


class InvalidRequestError(EnvError, ValueError):
    """The server rejected the request body or parameters (HTTP 422)."""


class EnvServerError(EnvError, RuntimeError):
    """The environment raised an unexpected exception on the server (HTTP 500)."""


class ServerStartError(EnvError, RuntimeError):
    """The environment server subprocess failed to start."""


class EnvCheckError(EnvError, AssertionError):
    """An environment breaks the Env contract; the message says which rule and how."""
