"""The per-turn penalty for a command the environment does not accept ("Nothing happens.").

A text game that answers an inadmissible command with "Nothing happens." gives no reward signal for it:
an agent that repeats one (a policy collapsed onto "go to <target>" while standing there) loses only
the turns. With a penalty p > 0 that turn's reward is -p, so the episode return is
R = 1[goal] - p * n_invalid and a step-level estimator (GiGPO) sees the loss on the very turn
(verl-agent's ALFWorld runs penalise invalid actions the same way, p = 0.1). Success is unchanged:
it stays info["success"], never the return. info["invalid_action"] marks such a turn either way.
"""

from __future__ import annotations

import math

INVALID_ACTION = "invalid_action"
"""info key: True on a turn whose command the environment did not accept."""


def check_penalty(value: float) -> float:
    """The penalty as a float >= 0 (0: off), or ValueError saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"invalid_action_penalty must be a finite number >= 0 (0 turns it off; verl-agent "
                         f"uses 0.1), got {value!r}")
    return float(value)


def turn_reward(won: bool, invalid: bool, penalty: float) -> float:
    """r_t = 1[won] - p * 1[invalid]: the goal's reward, less the penalty on an inadmissible command."""
    return (1.0 if won else 0.0) - (penalty if invalid else 0.0)
