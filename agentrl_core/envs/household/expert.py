"""The household expert: breadth-first search over the full state for a shortest plan.

The search sees hidden objects (it is omniscient) and is exact: it only skips actions that can
never shorten a plan — look/inventory (no effect), close (never enables anything), and taking an
object that is not of the goal kind (it would have to be put down again before any useful take).
`search(..., prune=False)` explores every action; the tests check both give the same length.
"""

from __future__ import annotations

from collections import deque

from agentrl_core.envs.household.world import Action, Scene, State, apply, goal_reached, legal_actions, render

_NO_EFFECT = frozenset({"look", "inventory"})


def _useful(scene: Scene, action: Action) -> bool:
    """False for actions that never appear in a shortest plan."""
    if action.verb in _NO_EFFECT or action.verb == "close":
        return False
    return action.verb != "take" or scene.objects[action.obj][1] == scene.goal.kind


def search(scene: Scene, state: State, *, prune: bool = True, limit: int = 64) -> list[Action] | None:
    """A shortest action list from `state` to the goal ([] if reached; None if none within `limit`).

    Ties break by the sorted command text, so the plan is deterministic.
    """
    if goal_reached(scene, state):
        return []
    parent: dict[State, tuple[State, Action] | None] = {state: None}
    frontier = deque([(state, 0)])
    while frontier:
        current, depth = frontier.popleft()
        if depth >= limit:
            continue
        actions = [a for a in legal_actions(scene, current) if not prune or _useful(scene, a)]
        if not prune:
            actions = [a for a in actions if a.verb not in _NO_EFFECT]  # self-loops only
        for action in sorted(actions, key=lambda a: render(scene, a)):
            nxt = apply(scene, current, action)
            if nxt in parent:
                continue
            parent[nxt] = (current, action)
            if goal_reached(scene, nxt):
                return _unwind(parent, nxt)
            frontier.append((nxt, depth + 1))
    return None


def _unwind(parent: dict[State, tuple[State, Action] | None], end: State) -> list[Action]:
    """Follow parent links back from `end` to the start."""
    plan: list[Action] = []
    link = parent[end]
    while link is not None:
        prev, action = link
        plan.append(action)
        link = parent[prev]
    return plan[::-1]
