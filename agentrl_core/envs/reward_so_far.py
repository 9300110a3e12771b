"""The reward so far: what an episode the agent loop cuts off has earned.

An environment that scores the whole episode at its end (BFCL: the share of the dialogue's turns passed,
or the format and tool-call reward of stages 1-2) gives 0.0 on every earlier step. When the agent loop,
not the environment, ends the episode (its context full, or `max_turns` played), that end never comes and
the episode would score 0 whatever it achieved; GRPO then reads "passed 3 of 4 turns, then ran out of
context" as no better than doing nothing. Such an environment puts

    info["reward_so_far"] = R_T   (the episode's total reward, were it truncated after this step)

on each step, and the loop credits an episode it cuts off after step t with it: the last step's reward
becomes r_t + (R_t - sum_{k<=t} r_k), so the episode's reward, the sum of its step rewards, is R_t.
This is what a reference multi-turn trainer does when it scores the interaction's log at the end of the
rollout, however the rollout ended. An episode the environment ends itself keeps its own rewards; an
environment that never reports the key (a reward only for reaching the goal) is unchanged.
"""

from __future__ import annotations

import math
from typing import Any

REWARD_SO_FAR = "reward_so_far"
"""info key: the episode's total reward if it were truncated after this step (a number in reward_range)."""


def check_reward_so_far(value: Any, reward_range: tuple[float, float]) -> float:
    """`value` as a float in `reward_range`, or ValueError saying what is wrong."""
    low, high = reward_range
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"info[{REWARD_SO_FAR!r}] must be a number in the env's reward_range "
                         f"[{low}, {high}] (the episode's total reward were it truncated now), got {value!r}")
    return float(value)


def credit(turn_rewards: list[float], so_far: float) -> None:
    """Make the step rewards sum to `so_far` by adding the difference to the last one (in place).

        r_t <- r_t + (R_t - sum_k r_k)

    e.g. [0.0, 0.0, 0.0] with R_t = 0.5 -> [0.0, 0.0, 0.5]. Needs at least one step.
    """
    if not turn_rewards:
        raise ValueError("credit needs at least one step reward")
    turn_rewards[-1] += so_far - math.fsum(turn_rewards)
