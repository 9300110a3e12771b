"""Typed errors, named by the boundary where they happened."""


class AgentRLError(Exception):
    """Base class of every error agentrl raises on purpose."""


class ConfigError(AgentRLError, ValueError):
    """A recipe or override is invalid: the message names the key and the valid choices."""


class PromptTooLongError(ConfigError):
    """An episode's opening prompt reaches rollout.max_context_tokens: no room is left for a reply. The message
    says how many, the longest and what to change; `python -m agentrl_core.rollout.prompt_fit --recipe R`
    measures a recipe's prompts before a run."""


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


class DiskFullError(AgentRLError):
    """A write failed for lack of space (ENOSPC, a quota, a full database): the message names the path,
    the free space left and how to go on. Never retried: the same write would fail the same way."""

    def __init__(self, path: str, free_bytes: int | None = None, mount: str | None = None,
                 resume_step: int | None = None) -> None:
        super().__init__(path, free_bytes, mount, resume_step)
        self.path, self.free_bytes, self.mount, self.resume_step = str(path), free_bytes, mount, resume_step

    def __reduce__(self):  # keep every field across pickling (Prefect results, Ray actors)
        return type(self), (self.path, self.free_bytes, self.mount, self.resume_step)

    def __str__(self) -> str:
        if self.free_bytes is not None:
            space = f"{self.free_bytes / 2**20:.0f} MiB free on {self.mount or 'its filesystem'}"
        else:
            space = f"free space on {self.mount or 'its filesystem'} unknown"
        then = "run the same command again"
        if self.resume_step is not None:  # set by the training loop, which knows its last complete checkpoint
            then += f" to resume from step {self.resume_step}"
        return f"no space left on device writing {self.path} ({space}): free space and {then}"


class ServerStartError(AgentRLError, RuntimeError):
    """A server process could not start: its port is taken, it exited during startup, or it never answered
    /health (the message holds the end of its output)."""
