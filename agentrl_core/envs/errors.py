"""Environment errors raised at the HTTP boundary and by the conformance checker."""

from __future__ import annotations

from agentrl_core.errors import EnvError, ResetNeededError, ServerStartError, TaskNotFoundError, UnknownEnvError

__all__ = [
    "EnvCheckError",
    "EnvError",
    "EnvServerError",
    "EnvServerUnavailable",
    "InvalidRequestError",
    "ResetNeededError",
    "ServerStartError",
    "SessionLostError",
    "SessionNotFoundError",
    "StepOutOfOrderError",
    "EnvTimeoutError",
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


class SessionLostError(EnvError, RuntimeError):
    """The session's worker process died (crash, kill -9, out of memory): start a new session.

    Only the sessions of that worker are lost; the server replaces the worker and keeps serving.
    """


class StepOutOfOrderError(EnvError, ValueError):
    """A step named by its number (`StepRequest.step`) that is neither the session's next step nor the one it
    took last (HTTP 409): the client and the server disagree on where the episode is; reset the session."""


class EnvTimeoutError(EnvError, TimeoutError):
    """An env call took longer than the server's limit; its worker was stopped and its sessions lost."""


class InvalidRequestError(EnvError, ValueError):
    """The server rejected the request body or parameters (HTTP 422)."""


class EnvServerError(EnvError, RuntimeError):
    """The environment raised an unexpected exception on the server (HTTP 500)."""


class EnvCheckError(EnvError, AssertionError):
    """An environment breaks the Env contract; the message says which rule and how."""
