"""Typed errors of the experience pool, named by the boundary where they happened."""

from __future__ import annotations

from agentrl_core.errors import AgentRLError


class ExperienceError(AgentRLError):
    """Base class of experience-pool errors."""


class ExperienceRequestError(ExperienceError, ValueError):
    """The pool rejected a request (HTTP 400/404/422): the message says which field is wrong."""


class ExperienceServerError(ExperienceError):
    """The pool failed while handling a valid request (HTTP 5xx); its log has the traceback."""


class ExperienceUnavailableError(ExperienceError, ConnectionError):
    """The pool could not be reached (connection refused, timeout): is it running at that URL?"""


class ExperienceStartError(ExperienceError):
    """The pool process did not start or did not answer /health in time; the message has its log tail."""
