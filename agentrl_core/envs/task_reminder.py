"""The task restated in every observation, for agents that lose the goal over a long episode.

A text game says its task once, in the first observation; by turn 5 of a multi-turn chat the goal is
hundreds of tokens back, and a small model drifts: most household failures of a 135M SFT agent take the
wrong object or put the right one in the wrong place. With `remind_task` the env appends
" Your task: <goal>." to every later observation (before the Actions line), as agent prompts that keep
a memory window restate the task each turn (verl-agent's ALFWorld template). It costs
~10 tokens a turn and changes no reward, success or admissible command.
"""

from __future__ import annotations

import re

_ALFWORLD_TASK = re.compile(r"Your task is to:\s*(.+?)\s*$", re.MULTILINE)


def check_flag(value: object) -> bool:
    """The flag as a bool, or ValueError saying what is wrong (a string such as "false" is refused)."""
    if not isinstance(value, bool):
        raise ValueError(f"remind_task must be true or false, got {value!r}")
    return value


def remind(text: str, goal: str) -> str:
    """`text` with the goal restated after it: "<text> Your task: <goal>." (goal without a final period)."""
    return f"{text} Your task: {goal.rstrip('.')}."


def alfworld_goal(first_observation: str) -> str:
    """The goal in ALFWorld's first observation ("Your task is to: put a clean mug in coffeemachine."),
    without its final period; ValueError when the observation has none."""
    found = _ALFWORLD_TASK.search(first_observation)
    if found is None:
        raise ValueError("remind_task: the first observation has no 'Your task is to:' line to restate")
    return found.group(1).rstrip(".")
