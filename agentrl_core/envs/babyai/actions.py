"""The high-level action set: which actions are available now, each compiled to primitives.

AgentGym's set: "turn left", "turn right", "move forward", "pickup <obj> <k>", "drop",
"go through <open door> <k>", "toggle and go through <closed|locked door> <k>", "toggle",
"go to goal", "go to <obj> <k>", "check available actions". Targets are the objects in the
current view; paths come from the BFS planner over the cells the agent has seen this episode
whose content it can stand on (never through walls, objects, closed doors or lava), so a macro
never uses knowledge the agent could not have. An action is offered only when it would act:
"move forward" when the cell ahead can be entered, "drop" when carrying and the cell ahead is
empty, "toggle" when a door (a locked one only with its key) or a box is ahead,
"toggle and go through" a locked door only while carrying a key of its colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl_core.envs.babyai.planner import (
    DROP,
    FORWARD,
    LEFT,
    PICKUP,
    RIGHT,
    TOGGLE,
    Reach,
)
from agentrl_core.envs.babyai.text import View

CHECK = "check available actions"
PICKABLE = frozenset({"key", "ball", "box"})


def walkable(obj: Any) -> bool:
    """Whether the planner may route through a cell holding `obj` (lava is avoided)."""
    return obj is None or (obj.can_overlap() and obj.type != "lava")


def _opens(door: Any, carrying: Any) -> bool:
    """Whether toggling `door` now would open it (unlocked, or locked and the key is carried)."""
    if not door.is_locked:
        return True
    return carrying is not None and carrying.type == "key" and carrying.color == door.color


def _front(env: Any) -> tuple[bool, Any]:
    """(whether the cell ahead is on the grid, its content)."""
    x, y = (int(v) for v in env.front_pos)
    inside = 0 <= x < env.grid.width and 0 <= y < env.grid.height
    return inside, env.grid.get(x, y) if inside else None


def _front_actions(inside: bool, front: Any) -> dict[str, list[int]]:
    """Turning is always possible; moving forward when the cell ahead can be entered."""
    acts = {"turn left": [LEFT], "turn right": [RIGHT]}
    if inside and (front is None or front.can_overlap()):
        acts["move forward"] = [FORWARD]
    return acts


def available_actions(env: Any, view: View, passable: Sequence[int]) -> dict[str, list[int]]:
    """Every available high-level action of minigrid env `env` -> its primitive actions, in list order."""
    carrying = env.carrying
    inside, front = _front(env)
    reach = Reach(env.grid.width, env.grid.height, passable, tuple(env.agent_pos), env.agent_dir)
    acts = _front_actions(inside, front)
    if carrying is None:
        for s in view.sightings:
            path = reach.path_to_face(s.cell) if s.kind in PICKABLE else None
            if path is not None:
                acts[f"pickup {s.label}"] = path + [PICKUP]
    elif inside and front is None:
        acts["drop"] = [DROP]
    for s in view.sightings:
        if s.kind != "door":
            continue
        door = env.grid.get(*s.cell)
        if door.is_open:
            path = reach.path_to_stand(s.cell)
            if path is not None:
                acts[f"go through {s.label}"] = path
        elif _opens(door, carrying):
            path = reach.path_to_face(s.cell)
            if path is not None:
                acts[f"toggle and go through {s.label}"] = path + [TOGGLE, FORWARD]
    if front is not None and (front.type == "box" or (front.type == "door" and (front.is_open or _opens(front, carrying)))):
        acts["toggle"] = [TOGGLE]
    goal = next((s for s in view.sightings if s.kind == "goal"), None)
    if goal is not None:
        path = reach.path_to_stand(goal.cell)
        if path is not None:
            acts["go to goal"] = path
    for s in view.sightings:
        if s.kind != "goal":
            path = reach.path_to_face(s.cell)
            if path is not None:
                acts[f"go to {s.label}"] = path
    acts[CHECK] = []
    return acts
