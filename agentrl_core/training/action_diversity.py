"""How differently a group acts in the same state: distinct actions per shared state, and how many steps share one."""

from __future__ import annotations

from typing import Sequence

from agentrl_core.rollout.trajectory import Trajectory


def state_actions(trajs: Sequence[Trajectory]) -> dict[tuple[int, str], list[str]]:
    """The action texts taken in each (group, observation key) state, over the error-free trajectories.

    Turn k's action is the reply text the environment received (`messages[2 + 2k]`); its state is
    `observation_keys[k]` (an exact match of the observation, as GiGPO's anchor states).
    """
    states: dict[tuple[int, str], list[str]] = {}
    for t in trajs:
        if t.error is not None:
            continue
        for k, key in enumerate(t.observation_keys):
            if 2 + 2 * k < len(t.messages):
                states.setdefault((t.group, key), []).append(t.messages[2 + 2 * k]["content"])
    return states


def action_diversity(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """distinct_actions_per_state: over the states of a group that two or more of its steps were taken in
    (turn 0's, shared by the whole group, always is when the group has 2+ samples), the mean number of
    distinct action texts sampled there (1 = the group always does the same thing; 0 = no such state).
    shared_state_steps: the fraction of steps taken in such a state (the steps GiGPO's step-level
    advantage can compare; the others get the episode-level advantage alone)."""
    states = state_actions(trajs)
    shared = [actions for actions in states.values() if len(actions) > 1]
    steps = sum(len(actions) for actions in states.values())
    return {
        "distinct_actions_per_state": sum(len(set(a)) for a in shared) / len(shared) if shared else 0.0,
        "shared_state_steps": sum(len(a) for a in shared) / steps if steps else 0.0,
    }
