"""The run registry's error: a database that cannot be opened, migrated or written."""

from __future__ import annotations

from agentrl_core.errors import AgentRLError


class RegistryError(AgentRLError):
    """The run registry failed: the message names the (redacted) database URL and how to fix it."""
