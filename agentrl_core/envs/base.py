"""The environment contract (after Gymnasium's `Env`): reset, step, close, plus an expert."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from agentrl_core.envs.extras import missing_extra_message, require_extra
from agentrl_core.errors import ResetNeededError


@dataclass(frozen=True)
class StepResult:
    """What one `step` returns.

    `terminated`: the task ended (won or lost). `truncated`: a limit (steps, attempts) was hit
    before the task ended. They are never both true.
    """

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


class Env(abc.ABC):
    """One episode at a time of a text environment.

    Subclasses set the class attributes and implement `_reset`, `_step` and `expert_action`.
    An invalid action from the model is an observation (e.g. "Nothing happens."), never an
    exception. `info["success"]` (bool) is set on the last step of every episode.
    """

    name: ClassVar[str]
    version: ClassVar[int] = 1  # registered as both `name` and `name-v{version}`
    extra: ClassVar[str | None] = None  # the pip extra that installs `requires`, e.g. "alfworld"
    requires: ClassVar[tuple[str, ...]] = ()  # importable modules the env needs at construction
    max_sessions: ClassVar[int | None] = None  # the server's cap on live sessions of this env, if lower
    dedicated_worker: ClassVar[bool] = False  # the server runs each session in a process of its own
    reuse_worker: ClassVar[bool] = False  # with dedicated_worker: a worker whose session closed serves the next one
    agentgym_convention: ClassVar[str] = "A"  # AgentGym's HTTP convention: "A" (id) or "B" (env_idx)
    action_format: ClassVar[str]
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    system_prompt: ClassVar[str]
    splits: ClassVar[dict[str, Sequence[int]]] = {}
    max_steps: int = 10

    def __init__(self) -> None:
        require_extra(type(self))
        self._active = False

    @classmethod
    def missing_extra(cls) -> str | None:
        """None when every module in `requires` imports; else the message naming the install command."""
        return missing_extra_message(cls.name, cls.extra, cls.requires)

    # -- tasks ---------------------------------------------------------------------------
    def task_ids(self, split: str) -> Sequence[int]:
        """The task ids of a split ("train" or "test"); the splits are disjoint."""
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; use one of {', '.join(map(repr, self.splits))}")
        return self.splits[split]

    # -- episode -------------------------------------------------------------------------
    def reset(
        self, *, task_id: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start task `task_id`; returns (observation, info)."""
        obs, info = self._reset(task_id=task_id, seed=seed, options=options or {})
        self._active = True
        return obs, info

    def step(self, action: str) -> StepResult:
        """Apply one action (free text from the model)."""
        if not self._active:
            raise ResetNeededError(f"{self.name}: call reset() before step()")
        result = self._step(action)
        if result.terminated or result.truncated:
            self._active = False
        return result

    def close(self) -> None:
        """Release resources; the env may not be used afterwards."""
        self._active = False

    @abc.abstractmethod
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ...

    @abc.abstractmethod
    def _step(self, action: str) -> StepResult:
        ...

    @abc.abstractmethod
    def expert_action(self) -> str:
        """The optimal next action from the current state (the text a perfect agent replies)."""
