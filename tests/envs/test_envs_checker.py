"""check_env: every registered env conforms; broken envs are caught with a clear message."""

from __future__ import annotations

import re
from typing import Any, Sequence

import pytest

from tests.envs.conftest import every_env

from agentrl_core.envs import Env, StepResult, check_env, make
from agentrl_core.envs.errors import EnvCheckError


@pytest.mark.slow
@pytest.mark.parametrize("name", every_env())
def test_registered_env_conforms(name: str) -> None:
    check_env(make(name))


class Guess(Env):
    """A tiny correct env: guess the task id; the expert knows it."""

    name = "guess"
    action_format = "a number"
    system_prompt = "Guess the number."
    max_steps = 3

    def __init__(self) -> None:
        super().__init__()
        self.answer = 0
        self.steps = 0

    def task_ids(self, split: str) -> Sequence[int]:
        return range(0, 10) if split == "train" else range(10, 12)

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.answer, self.steps = task_id, 0
        return "Guess.", {}

    def _step(self, action: str) -> StepResult:
        self.steps += 1
        won = action.strip() == str(self.answer)
        done = won or self.steps >= self.max_steps
        return StepResult("Yes." if won else "No.", float(won), won, done and not won, {"success": won})

    def expert_action(self) -> str:
        return str(self.answer)


def test_a_correct_toy_env_passes() -> None:
    check_env(Guess())


class Overlapping(Guess):
    def task_ids(self, split: str) -> Sequence[int]:
        return range(0, 10) if split == "train" else range(5, 12)


class Random(Guess):
    calls = 0

    def _reset(self, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        Random.calls += 1
        super()._reset(**kwargs)
        return f"Guess #{Random.calls}.", {}


class RaisesOnNonsense(Guess):
    def _step(self, action: str) -> StepResult:
        if not action.strip().isdigit():
            raise ValueError("not a number")
        return super()._step(action)


class BadExpert(Guess):
    def expert_action(self) -> str:
        return "-1"


class BothFlags(Guess):
    def _step(self, action: str) -> StepResult:
        r = super()._step(action)
        return StepResult(r.observation, r.reward, r.terminated, r.terminated, r.info)


class NeverEnds(Guess):
    def _step(self, action: str) -> StepResult:
        return StepResult("No.", 0.0, False, False, {})


class RewardTooHigh(Guess):
    def _step(self, action: str) -> StepResult:
        r = super()._step(action)
        return StepResult(r.observation, r.reward * 2, r.terminated, r.truncated, r.info)


class NoSuccessFlag(Guess):
    def _step(self, action: str) -> StepResult:
        r = super()._step(action)
        return StepResult(r.observation, r.reward, r.terminated, r.truncated, {})


class StepsBeforeReset(Guess):
    def step(self, action: str) -> StepResult:
        return self._step(action)


@pytest.mark.parametrize(
    ("env_cls", "message"),
    [
        (Overlapping, "overlap"),
        (Random, "not deterministic"),
        (RaisesOnNonsense, "ValueError"),
        (BadExpert, "the expert failed"),
        (BothFlags, "terminated and truncated both true"),
        (NeverEnds, "did not end within max_steps=3"),
        (RewardTooHigh, "outside reward_range"),
        (NoSuccessFlag, "info['success']"),
        (StepsBeforeReset, "before any reset() must raise ResetNeededError"),
    ],
)
def test_broken_envs_are_caught(env_cls: type[Guess], message: str) -> None:
    with pytest.raises(EnvCheckError, match=r"^guess: .*" + re.escape(message)):
        check_env(env_cls())


def test_check_error_is_an_assertion_error() -> None:
    assert issubclass(EnvCheckError, AssertionError)
