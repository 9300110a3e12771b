"""The conformance checker: `check_env` runs an Env through every rule of the contract.

After Gymnasium's `utils/env_checker.py`. Rules: name/action_format/system_prompt are non-empty;
splits "train" and "test" are non-empty and disjoint; `step` before `reset` raises
ResetNeededError; `reset` returns (str, dict) and is deterministic for a task id and seed; any
action (nonsense included) returns a StepResult, never an exception; rewards stay in
`reward_range`; terminated and truncated are never both true; the last step sets
`info["success"]`; every episode ends within `max_steps`; the expert wins every sampled task with
a reward above the bottom of `reward_range` (the top, for envs without step-discounted rewards); `step` after the end raises ResetNeededError; `close()` works;
an `info["reward_so_far"]`, where reported, is a number in `reward_range`.

Pass a fresh env (never reset yet). Works the same on a RemoteEnv over HTTP.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.errors import EnvCheckError
from agentrl_core.envs.reward_so_far import REWARD_SO_FAR, check_reward_so_far
from agentrl_core.errors import ResetNeededError

NONSENSE = "asdf qwerty"

__all__ = ["EnvCheckError", "check_env"]


def check_env(env: Env, *, tasks_per_split: int = 3) -> None:
    """Raise EnvCheckError naming the first broken rule; return None when `env` conforms."""
    _check_attributes(env)
    train, test = _check_splits(env)
    _expect_reset_needed(env, "step() before any reset()")
    samples = _sample(train, tasks_per_split) + _sample(test, tasks_per_split)
    _check_reset_deterministic(env, samples[0])
    for task_id in samples:
        _check_expert_episode(env, task_id)
    _check_nonsense_episode(env, samples[-1])
    env.close()


def _require(env: Env, ok: bool, message: str) -> None:
    if not ok:
        raise EnvCheckError(f"{getattr(env, 'name', type(env).__name__)}: {message}")


def _check_attributes(env: Env) -> None:
    for attr in ("name", "action_format", "system_prompt"):
        value = getattr(env, attr, None)
        ok = isinstance(value, str) and bool(value.strip())
        _require(env, ok, f"`{attr}` must be a non-empty str, got {value!r}")
    low, high = env.reward_range
    _require(env, low < high, f"reward_range must be (low, high) with low < high, got {env.reward_range}")
    steps = env.max_steps
    _require(env, isinstance(steps, int) and steps >= 1, f"max_steps must be an int >= 1, got {steps!r}")


def _check_splits(env: Env) -> tuple[list[int], list[int]]:
    train, test = list(env.task_ids("train")), list(env.task_ids("test"))
    _require(env, bool(train) and bool(test), f"splits must be non-empty (train {len(train)}, test {len(test)} ids)")
    _require(env, all(isinstance(t, int) for t in train + test), "task ids must be ints")
    overlap = sorted(set(train) & set(test))
    _require(env, not overlap, f"train and test splits overlap, e.g. task ids {overlap[:5]}")
    return train, test


def _sample(ids: Sequence[int], k: int) -> list[int]:
    """k ids spread evenly over the split (deterministic): first, ..., last."""
    if k <= 1 or len(ids) <= 1:
        return [ids[0]]
    k = min(k, len(ids))
    return [ids[round(i * (len(ids) - 1) / (k - 1))] for i in range(k)]


def _expect_reset_needed(env: Env, when: str) -> None:
    """A step now must raise ResetNeededError."""
    try:
        env.step(NONSENSE)
    except ResetNeededError:
        return
    except Exception as exc:  # noqa: BLE001 - report the wrong type, do not crash
        raise EnvCheckError(
            f"{env.name}: {when} must raise ResetNeededError, raised {type(exc).__name__}: {exc}"
        ) from exc
    raise EnvCheckError(f"{env.name}: {when} must raise ResetNeededError, but it returned")


def _check_reset(env: Env, task_id: int) -> tuple[str, dict[str, Any]]:
    out = env.reset(task_id=task_id, seed=0)
    ok = isinstance(out, tuple) and len(out) == 2
    _require(env, ok, f"reset() must return (observation, info), got {type(out).__name__}")
    obs, info = out
    _require(env, isinstance(obs, str) and bool(obs), f"reset() observation must be a non-empty str, got {obs!r:.80}")
    _require(env, isinstance(info, dict), f"reset() info must be a dict, got {type(info).__name__}")
    return obs, info


def _check_reset_deterministic(env: Env, task_id: int) -> None:
    first = _check_reset(env, task_id)
    _step(env, NONSENSE)  # the second reset must not depend on what happened in between
    second = _check_reset(env, task_id)
    _require(
        env, first == second,
        f"reset(task_id={task_id}, seed=0) is not deterministic:\n{first[0]!r}\nvs\n{second[0]!r}",
    )


def _step(env: Env, action: str) -> StepResult:
    """env.step, with any exception reported as a broken rule (invalid actions are observations)."""
    try:
        result = env.step(action)
    except Exception as exc:  # noqa: BLE001 - report, do not crash the checker
        raise EnvCheckError(
            f"{env.name}: step({action!r}) raised {type(exc).__name__}: {exc}; an invalid action must "
            "return an observation, never raise"
        ) from exc
    check_step_result(env, result, action)
    return result


def check_step_result(env: Env, result: StepResult, action: str) -> None:
    """EnvCheckError unless `result` of step(`action`) keeps the contract: a StepResult with a str
    observation, a reward in reward_range, not both terminated and truncated, info["success"] at the end."""
    said = f"step({action[:200]!r})"
    _require(env, isinstance(result, StepResult), f"{said} must return a StepResult, got {type(result).__name__}")
    _require(env, isinstance(result.observation, str), f"{said} observation must be a str")
    low, high = env.reward_range
    in_range = low <= result.reward <= high
    _require(env, in_range, f"{said} reward {result.reward} is outside reward_range {env.reward_range}")
    _require(env, not (result.terminated and result.truncated), f"{said} returned terminated and truncated both true")
    _require(env, isinstance(result.info, dict), f"{said} info must be a dict")
    if REWARD_SO_FAR in result.info:
        try:
            check_reward_so_far(result.info[REWARD_SO_FAR], env.reward_range)
        except ValueError as err:
            raise EnvCheckError(f"{env.name}: {said}: {err}") from err
    if result.terminated or result.truncated:
        ok = isinstance(result.info.get("success"), bool)
        _require(env, ok, f"the last step must set info['success'] (bool), got {result.info}")


def _play(env: Env, task_id: int, choose: Callable[[], str]) -> tuple[StepResult, int]:
    """Reset and play until the episode ends, at most max_steps steps; returns (last result, steps)."""
    _check_reset(env, task_id)
    for steps in range(1, env.max_steps + 1):
        result = _step(env, choose())
        if result.terminated or result.truncated:
            return result, steps
    raise EnvCheckError(f"{env.name}: task {task_id} did not end within max_steps={env.max_steps} steps")


def _check_expert_episode(env: Env, task_id: int) -> None:
    result, steps = _play(env, task_id, env.expert_action)
    won = result.terminated and result.info.get("success") is True
    _require(env, won, f"the expert failed task {task_id} after {steps} steps: {result.observation!r:.200}")
    _require(
        env, result.reward > env.reward_range[0],
        f"the expert's final reward on task {task_id} is {result.reward}, the bottom of {env.reward_range}",
    )
    _expect_reset_needed(env, "step() after the episode ended")


def _check_nonsense_episode(env: Env, task_id: int) -> None:
    result, _ = _play(env, task_id, lambda: NONSENSE)
    _require(env, result.info.get("success") is False, f"nonsense actions solved task {task_id}")
    _expect_reset_needed(env, "step() after the episode ended")
