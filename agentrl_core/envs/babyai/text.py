"""The text rendering of the agent's 7x7 view, in AgentGym's sentences.

Objects (doors with their state, keys, balls, boxes, the goal, lava) in the visible part of
the egocentric view are listed nearest first (Manhattan distance; ties in view scan order, far
row to near row, left to right), numbered per name ("red ball 1", "red ball 2"):
"There is a <name> <k> N steps in front of you and M steps to your right." ("... right in
front of you N steps away." when straight ahead). Then "The room has walls around you." with
the nearest wall or box straight ahead, then what the agent carries. Unlike AgentGym we do not
keep its doubled spaces, and we list no objects sentence when only walls are in view.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentrl_core.envs.babyai.planner import DIRS, Cell

LISTED = frozenset({"door", "key", "ball", "box", "goal", "lava"})
BARRIERS = frozenset({"wall", "box"})


@dataclass(frozen=True)
class Sighting:
    """One object in view: its name ("red closed door"), number among same-named objects,
    type, absolute cell, and offset from the agent (steps in front, steps to the right)."""

    name: str
    index: int
    kind: str
    cell: Cell
    front: int
    right: int

    @property
    def label(self) -> str:
        """How actions name it: "<name> <k>", e.g. "red ball 2"."""
        return f"{self.name} {self.index}"


@dataclass(frozen=True)
class View:
    """What the agent sees now: listed objects, the nearest barrier ahead, and visible cells."""

    sightings: tuple[Sighting, ...]
    barrier: tuple[str, int] | None  # (wall|box, steps ahead)
    visible: tuple[Cell, ...]


def object_name(obj: Any) -> str:
    """AgentGym's name of a minigrid object: "<color> <type>", doors "<color> <state> door"."""
    if obj.type == "door":
        state = "open" if obj.is_open else "locked" if obj.is_locked else "closed"
        return f"{obj.color} {state} door"
    return f"{obj.color} {obj.type}"


def observe(env: Any, image: Any) -> View:
    """The view of minigrid env `env`, whose last observation image is `image` (7x7x3; type 0 = unseen).

    Cell (i, j) of the view is absolute cell pos + (6 - j) * forward + (i - 3) * right.
    """
    size = env.agent_view_size
    (px, py), d = env.agent_pos, env.agent_dir
    (fx, fy), (rx, ry) = DIRS[d], DIRS[(d + 1) % 4]
    width, height = env.grid.width, env.grid.height
    found: list[tuple[int, str, str, Cell, int, int]] = []
    visible: list[Cell] = []
    barrier: tuple[str, int] | None = None
    for j in range(size):
        front = size - 1 - j
        for i in range(size):
            if image[i, j, 0] == 0:
                continue
            right = i - size // 2
            x, y = px + front * fx + right * rx, py + front * fy + right * ry
            if not (0 <= x < width and 0 <= y < height):
                continue
            visible.append((x, y))
            obj = env.grid.get(x, y)
            if obj is None or (front == 0 and right == 0):
                continue
            if obj.type in BARRIERS and right == 0 and (barrier is None or front < barrier[1]):
                barrier = (obj.type, front)
            if obj.type in LISTED:
                found.append((front + abs(right), object_name(obj), obj.type, (x, y), front, right))
    found.sort(key=lambda f: f[0])  # stable: ties keep scan order
    counts: dict[str, int] = {}
    sightings = []
    for _, name, kind, cell, front, right in found:
        counts[name] = counts.get(name, 0) + 1
        sightings.append(Sighting(name, counts[name], kind, cell, front, right))
    return View(tuple(sightings), barrier, tuple(visible))


def where(front: int, right: int) -> str:
    """ "right in front of you N steps away" or "N steps in front of you and M steps to your right/left"."""
    if right == 0:
        return f"right in front of you {front} steps away"
    side = "right" if right > 0 else "left"
    return f"{front} steps in front of you and {abs(right)} steps to your {side}"


def describe(view: View, carrying: Any) -> str:
    """The observation text of a view (without the goal line and the action list)."""
    parts = []
    if view.sightings:
        parts.append("In front of you in this room, you can see several objects:")
        parts.extend(f"There is a {s.label} {where(s.front, s.right)}." for s in view.sightings)
    else:
        parts.append("You cannot see any objects within sight.")
    parts.append("The room has walls around you.")
    if view.barrier is not None:
        parts.append(f"You are facing a {view.barrier[0]} {view.barrier[1]} steps away.")
    if carrying is not None:
        parts.append(f"You are carrying a {carrying.color} {carrying.type}.")
    else:
        parts.append("You are not carrying anything.")
    return " ".join(parts)


def actions_line(actions: Iterable[str]) -> str:
    """ 'Available actions: ["turn left", "turn right", ...]' (AgentGym's list format)."""
    return "Available actions: " + json.dumps(list(actions))
