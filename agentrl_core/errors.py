"""Typed errors, named by the boundary where they happened."""


class AgentRLError(Exception):
    """Base class of every error agentrl raises on purpose."""


class ConfigError(AgentRLError, ValueError):
    """A recipe or override is invalid: the message names the key and the valid choices."""


class ModelNotFoundError(AgentRLError, FileNotFoundError):
    """A model name resolves to nothing: the message says how to get it."""


class EnvError(AgentRLError):
    """Base class of environment errors."""


class UnknownEnvError(EnvError, KeyError):
    """No environment is registered under that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingExtraError(EnvError, ImportError):
    """An environment needs an optional dependency that is not installed; the message says how."""


class ResetNeededError(EnvError):
    """`step` was called before `reset`, or after the episode ended."""


class TaskNotFoundError(EnvError):
    """The task id is outside the environment's splits."""


class CheckpointError(AgentRLError):
    """A checkpoint is missing, incomplete or does not match the run."""
