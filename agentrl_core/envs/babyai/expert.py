"""The expert: a subgoal planner over the BabyAI mission that sees the whole true grid.

It walks the mission's instruction tree (Before: a then b; After: b then a; And: a then b) to
the clause still to do, turns it into a goal (face one of some cells, then pick up / toggle /
drop, or nothing for "go to"), and plans on the true grid with Dijkstra over (cell, direction)
states. Entering a free cell costs 1, a closed door 2 (toggle, then forward); a locked door
without its key or a cell holding an object costs BIG, so such a cell is used only when there
is no other way: the first one on the path becomes a subgoal (fetch the key of that colour,
toggling open the box that holds it, or pick the object up and drop it off the path).
Picking up while carrying first drops the load on a free cell off the path.

The plan is then said as one high-level action: "pickup X" / "go to X" when the target is in
view and the env offers it, else "go through" / "toggle and go through" the first door on the
path when offered, else the plan's first primitive ("move forward", "turn left", ...).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentrl_core.envs.babyai.planner import (
    DIRS,
    DROP,
    FORWARD,
    LEFT,
    PICKUP,
    RIGHT,
    TOGGLE,
    Cell,
)
from agentrl_core.envs.babyai.text import View

BIG = 1000
MAX_DEPTH = 5
PRIMITIVE_TEXT = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward", TOGGLE: "toggle", DROP: "drop"}


class ExpertStuck(RuntimeError):
    """The expert found no plan (a level this planner does not handle)."""


@dataclass(frozen=True)
class Goal:
    """Face one of `cells`, then do `final` (PICKUP, TOGGLE, DROP, or None for "go to")."""

    cells: tuple[Cell, ...]
    final: int | None
    strict: bool = False  # toggling any other door fails the mission (strict "open" clauses)
    avoid: frozenset[Cell] = frozenset()  # cells to keep clear when dropping things on the way


@dataclass(frozen=True)
class Route:
    """A planned route: primitives up to the target or to the first blocking cell."""

    steps: list[int]
    target: Cell
    blocker: Cell | None
    cells: frozenset[Cell]  # cells the whole route passes through (blockers included)
    unlocks: bool = False  # the steps open a locked door (with the carried key)


# -- the clause to do now ----------------------------------------------------------------------
def current_clause(instr: Any) -> Any:
    """The action clause of a BabyAI instruction tree that is still to be done."""
    kind = type(instr).__name__
    if kind == "BeforeInstr":
        return current_clause(instr.instr_a if instr.a_done != "success" else instr.instr_b)
    if kind == "AfterInstr":
        return current_clause(instr.instr_b if instr.b_done != "success" else instr.instr_a)
    if kind == "AndInstr":
        return current_clause(instr.instr_a if instr.a_done != "success" else instr.instr_b)
    return instr


def _on_grid(env: Any, objs: Iterable[Any]) -> tuple[Cell, ...]:
    cells = []
    for obj in objs:
        pos = getattr(obj, "cur_pos", None)
        inside = pos is not None and 0 <= pos[0] < env.grid.width and 0 <= pos[1] < env.grid.height
        if inside and env.grid.get(*pos) is obj:
            cells.append((int(pos[0]), int(pos[1])))
    return tuple(cells)


def _in_bounds(env: Any, poss: Iterable[Any]) -> tuple[Cell, ...]:
    return tuple(
        (int(p[0]), int(p[1])) for p in poss if 0 <= p[0] < env.grid.width and 0 <= p[1] < env.grid.height
    )


def _carries_key(env: Any, color: str) -> bool:
    c = env.carrying
    return c is not None and c.type == "key" and c.color == color


def _holds_key(obj: Any, color: str) -> bool:
    """Whether `obj` is a box with a key of `color` inside."""
    inner = getattr(obj, "contains", None) if obj is not None and obj.type == "box" else None
    return inner is not None and inner.type == "key" and inner.color == color


def key_goal(env: Any, color: str) -> Goal:
    """Get a key of `color`: pick one up, or toggle open the box that holds one."""
    keys, boxes = [], []
    for i, obj in enumerate(env.grid.grid):
        cell = (i % env.grid.width, i // env.grid.width)
        if obj is not None and obj.type == "key" and obj.color == color:
            keys.append(cell)
        elif _holds_key(obj, color):
            boxes.append(cell)
    if keys:
        return Goal(tuple(keys), PICKUP)
    held = env.carrying
    if _holds_key(held, color):
        return drop_goal(env, frozenset())  # the box was moved out of the way: put it down to open it
    if boxes:
        return Goal(tuple(boxes), TOGGLE)
    raise ExpertStuck(f"no {color} key anywhere")


def _next_to(env: Any, cells: Iterable[Cell]) -> tuple[Cell, ...]:
    """Empty cells next to any of `cells` (where a dropped object ends up next to them)."""
    out = []
    for x, y in cells:
        for dx, dy in DIRS:
            c = (x + dx, y + dy)
            if 0 <= c[0] < env.grid.width and 0 <= c[1] < env.grid.height and env.grid.get(*c) is None:
                out.append(c)
    return tuple(dict.fromkeys(out))


def clause_goal(env: Any, clause: Any) -> Goal:
    """The goal that advances one action clause (GoTo, Open, Pickup, PutNext)."""
    kind = type(clause).__name__
    if kind == "GoToInstr":
        return Goal(_in_bounds(env, clause.desc.obj_poss), None)
    if kind == "PickupInstr":
        return Goal(_on_grid(env, clause.desc.obj_set), PICKUP)
    if kind == "OpenInstr":
        doors = _on_grid(env, clause.desc.obj_set)
        usable = [c for c in doors if not env.grid.get(*c).is_locked or _carries_key(env, env.grid.get(*c).color)]
        if usable or not doors:
            return Goal(tuple(usable), TOGGLE, bool(clause.strict))
        return clear_first(env, Goal(doors[:1], TOGGLE), key_goal(env, env.grid.get(*doors[0]).color))
    if kind == "PutNextInstr":
        return put_next_goal(env, clause)
    raise ExpertStuck(f"unknown clause {kind}")


def clear_first(env: Any, later: Goal, now: Goal) -> Goal:
    """`now` (a pickup), unless an object blocks the way to `later`: then pick that up first,
    while the hands are still free (carrying `now`'s object, we would drop it to clear the
    way and pick it up again, for ever)."""
    ahead = route(env, later, any_dir=True)
    if ahead.blocker is not None and env.grid.get(*ahead.blocker).type != "door":
        return Goal((ahead.blocker,), PICKUP, avoid=ahead.cells)
    return Goal(now.cells, now.final, now.strict, ahead.cells)


def put_next_goal(env: Any, clause: Any) -> Goal:
    """Carry the object to a free cell next to the fixed one and drop it."""
    drop = Goal(_next_to(env, _in_bounds(env, clause.desc_fixed.obj_poss)), DROP)
    if any(env.carrying is o for o in clause.desc_move.obj_set):
        return drop
    return clear_first(env, drop, Goal(_on_grid(env, clause.desc_move.obj_set), PICKUP))


# -- routes on the true grid --------------------------------------------------------------------
def _enter_cost(obj: Any, env: Any, strict: bool = False) -> int | None:
    """Cost of moving into a cell holding `obj`; None when it can never be entered."""
    if obj is None or obj.type in ("goal", "floor"):
        return 1
    if obj.type == "door":
        if obj.is_open:
            return 1
        if strict:
            return None
        return 2 if not obj.is_locked or _carries_key(env, obj.color) else BIG
    if obj.type in ("key", "ball", "box"):
        return BIG
    return None  # wall, lava


def _dijkstra(
    env: Any, targets: tuple[Cell, ...], strict: bool, any_dir: bool = False
) -> tuple[tuple[Cell, int], list[tuple[Cell, int, int]]] | None:
    """The end state and cheapest (cell, dir, action) chain from the agent to face one of `targets`
    (from the agent's cell in any direction, when `any_dir`)."""
    width, grid = env.grid.width, env.grid
    goal_states = {((tx - dx, ty - dy), d) for tx, ty in targets for d, (dx, dy) in enumerate(DIRS)}
    pos = (int(env.agent_pos[0]), int(env.agent_pos[1]))
    starts = [(pos, d) for d in range(4)] if any_dir else [(pos, int(env.agent_dir))]
    best = {s: 0 for s in starts}
    parent: dict[Any, Any] = {s: None for s in starts}
    heap = [(0, i, s) for i, s in enumerate(starts)]
    tick = len(starts)
    while heap:
        cost, _, state = heapq.heappop(heap)
        if cost > best[state]:
            continue
        if state in goal_states:
            end, chain = state, []
            while parent[state] is not None:
                prev, action = parent[state]
                chain.append((state[0], state[1], action))
                state = prev
            return end, chain[::-1]
        (x, y), d = state
        moves = [(((x, y), (d - 1) % 4), 1, LEFT), (((x, y), (d + 1) % 4), 1, RIGHT)]
        nx, ny = x + DIRS[d][0], y + DIRS[d][1]
        if 0 <= nx < width and 0 <= ny < grid.height:
            step = _enter_cost(grid.get(nx, ny), env, strict)
            if step is not None:
                moves.append((((nx, ny), d), step, FORWARD))
        for nxt, step, action in moves:
            if cost + step < best.get(nxt, 1 << 30):
                best[nxt] = cost + step
                parent[nxt] = (state, action)
                tick += 1
                heapq.heappush(heap, (cost + step, tick, nxt))
    return None


def route(env: Any, goal: Goal, any_dir: bool = False) -> Route:
    """Primitives towards `goal`, stopping before the first cell that needs work (the blocker).

    With `any_dir` the route may start in any direction (its cells then do not change as the
    agent turns on the spot; its steps are not meant to be run)."""
    found = _dijkstra(env, goal.cells, goal.strict, any_dir) if goal.cells else None
    if found is None:
        raise ExpertStuck(f"no route to any of {goal.cells}")
    (end_cell, end_dir), chain = found
    target = (end_cell[0] + DIRS[end_dir][0], end_cell[1] + DIRS[end_dir][1])
    cells = frozenset(c for c, _, _ in chain) | {target}
    steps: list[int] = []
    unlocks = False
    for cell, _, action in chain:
        if action == FORWARD:
            obj = env.grid.get(*cell)
            if _enter_cost(obj, env) == BIG:
                return Route(steps, target, cell, cells, unlocks)
            if obj is not None and obj.type == "door" and not obj.is_open:
                steps.append(TOGGLE)
                unlocks = unlocks or obj.is_locked
        steps.append(action)
    if goal.final is not None:
        steps.append(goal.final)
    return Route(steps, target, None, cells, unlocks)


def drop_goal(env: Any, avoid: frozenset[Cell], calm: bool = True) -> Goal:
    """Face a free cell off the planned path (if `calm`, and if possible, not beside a door), then drop."""
    width = env.grid.width
    free = [(i % width, i // width) for i, obj in enumerate(env.grid.grid) if obj is None]
    free = [c for c in free if c not in avoid]

    def beside_door(c: Cell) -> bool:
        for dx, dy in DIRS:
            x, y = c[0] + dx, c[1] + dy
            obj = env.grid.get(x, y) if 0 <= x < width and 0 <= y < env.grid.height else None
            if obj is not None and obj.type == "door":
                return True
        return False

    quiet = [c for c in free if not beside_door(c)] if calm else []
    return Goal(tuple(quiet or free), DROP)


def plan(env: Any, goal: Goal, avoid: frozenset[Cell] = frozenset(), blockers: tuple[Cell, ...] = ()) -> tuple[Goal, Route]:
    """The goal to work on now (a subgoal when the way is blocked) and its route."""
    if len(blockers) > MAX_DEPTH:
        raise ExpertStuck("subgoals nest too deep")
    r = route(env, goal)
    if r.blocker is not None:
        if r.blocker in blockers:  # e.g. the key is behind its own locked door (a minigrid level bug)
            raise ExpertStuck(f"unsolvable: the way to {goal.cells} needs {r.blocker} cleared first, and vice versa")
        obj = env.grid.get(*r.blocker)
        sub = key_goal(env, obj.color) if obj.type == "door" else Goal((r.blocker,), PICKUP)
        return plan(env, sub, avoid | r.cells, blockers + (r.blocker,))
    if goal.final == PICKUP and env.carrying is not None:
        if r.unlocks:  # the carried key opens a door on the way: keep it until then
            return goal, Route(r.steps[:-1], r.target, None, r.cells, True)
        keep = avoid | goal.avoid | route(env, goal, any_dir=True).cells
        goal = drop_goal(env, keep)
        r = route(env, goal)
        if r.blocker is not None:  # the cells away from doors are out of reach: any free cell will do
            goal = drop_goal(env, keep, calm=False)
            r = route(env, goal)
        if r.blocker is not None:
            return plan(env, goal, avoid, blockers)
    return goal, r


# -- saying the plan as one high-level action --------------------------------------------------
def _first_door(env: Any, steps: list[int]) -> Cell | None:
    """The first door cell the primitive plan walks into, if any."""
    (x, y), d = (int(env.agent_pos[0]), int(env.agent_pos[1])), int(env.agent_dir)
    for a in steps:
        if a == LEFT:
            d = (d - 1) % 4
        elif a == RIGHT:
            d = (d + 1) % 4
        elif a == FORWARD:
            x, y = x + DIRS[d][0], y + DIRS[d][1]
            obj = env.grid.get(x, y)
            if obj is not None and obj.type == "door":
                return (x, y)
    return None


def say(env: Any, goal: Goal, r: Route, actions: dict[str, list[int]], view: View) -> str:
    """The high-level action that carries out route `r` (or its first step)."""
    labels = {s.cell: s.label for s in view.sightings}
    label = labels.get(r.target)
    if len(r.steps) > 1 and label is not None:
        macro = f"pickup {label}" if goal.final == PICKUP else f"go to {label}" if goal.final != DROP else None
        if macro in actions:
            return macro
    door = _first_door(env, r.steps)
    if door is not None and door in labels:
        obj = env.grid.get(*door)
        macro = f"go through {labels[door]}" if obj.is_open else f"toggle and go through {labels[door]}"
        if macro in actions:
            return macro
    first = r.steps[0]
    if first == PICKUP:
        return f"pickup {labels.get(tuple(int(v) for v in env.front_pos), '?')}"
    return PRIMITIVE_TEXT[first]


def expert_action(env: Any, actions: dict[str, list[int]], view: View) -> str:
    """A high-level action that makes progress on the mission of minigrid env `env`.

    Raises ExpertStuck when it finds no plan (some minigrid layouts cannot be solved)."""
    goal, r = plan(env, clause_goal(env, current_clause(env.instrs)))
    if not r.steps:  # already facing a "go to" target that became the clause after the facing
        return "turn left"  # minigrid checks a clause only when a primitive runs; the route turns back
    return say(env, goal, r, actions, view)
