"""The scene generator: (seed, task id, difficulty) -> a household scene with one task of six types.

A scene is one room: numbered receptacles (each at its own location, openable ones closed or open),
objects inside them (copies of the goal object plus distractors), and a goal: the task type, the
goal object kind, the target receptacle kind (or the lamp, for looking under a light). The draw is
pure Python; `agentrl_core.envs.alfworld.dataset` asks the engine's planner whether it is solvable.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

from agentrl_core.envs.alfworld.catalog import (
    LAMP,
    LAMP_HOLDERS,
    RECEPTACLE_KINDS,
    TASK_RULES,
    TASK_TYPES,
    capabilities,
    holds,
    object_kinds,
    receptacle_kinds,
)

LOOK = "look_at_obj_in_light"
TWO = "pick_two_obj_and_place"


@dataclass(frozen=True)
class Difficulty:
    """Knobs of the generator. Defaults give ALFWorld-like games that plan in well under a second."""

    min_receptacles: int = 6
    max_receptacles: int = 12
    min_distractors: int = 3
    max_distractors: int = 10
    max_goal_copies: int = 2  # instances of the goal object kind (pick_two: at least 2)
    closed_prob: float = 1.0  # chance each openable receptacle starts closed (ALFWorld: all closed)
    hidden_prob: float = 0.4  # chance a goal object is put in an openable receptacle when one fits
    task_types: tuple[str, ...] = TASK_TYPES

    def validate(self) -> None:
        """Raise ValueError naming the bad knob and its valid range."""
        if not 3 <= self.min_receptacles <= self.max_receptacles <= 30:
            raise ValueError(
                f"need 3 <= min_receptacles <= max_receptacles <= 30, got {self.min_receptacles}, {self.max_receptacles}"
            )
        if not 0 <= self.min_distractors <= self.max_distractors <= 40:
            raise ValueError(
                f"need 0 <= min_distractors <= max_distractors <= 40, got {self.min_distractors}, {self.max_distractors}"
            )
        if not 1 <= self.max_goal_copies <= 5:
            raise ValueError(f"max_goal_copies must be in [1, 5], got {self.max_goal_copies}")
        for knob in ("closed_prob", "hidden_prob"):
            if not 0.0 <= getattr(self, knob) <= 1.0:
                raise ValueError(f"{knob} must be in [0, 1], got {getattr(self, knob)}")
        unknown = [t for t in self.task_types if t not in TASK_TYPES]
        if unknown or not self.task_types:
            raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {self.task_types}")

    def key(self) -> str:
        """A short stable digest of the knobs (names the cache folder of non-default difficulties)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Receptacle:
    """One receptacle: kind, number within its kind, and open/closed state."""

    kind: str
    number: int
    openable: bool
    opened: bool

    @property
    def pddl_id(self) -> str:
        """ALFRED-style id, rendered by the engine as "<kind> <n>" (basins as "sinkbasin <n>")."""
        if self.kind.endswith("Basin"):  # ALFRED's Sink|..|SinkBasin form; the demangler appends "basin"
            return f"{self.kind[:-5]}_bar_{self.number:02d}_bar_{self.kind}"
        return f"{self.kind}_bar_{self.number:02d}"


@dataclass(frozen=True)
class Thing:
    """One object: kind, number within its kind, and the index of the receptacle it is in."""

    kind: str
    number: int
    place: int

    @property
    def pddl_id(self) -> str:
        """ALFRED-style id, rendered by the engine as "<kind> <n>"."""
        return f"{self.kind}_bar_{self.number:02d}"


@dataclass(frozen=True)
class Scene:
    """A generated room with one task: find `obj`, transform it if asked, and place it (or look)."""

    task_type: str
    room: str
    receptacles: tuple[Receptacle, ...]
    things: tuple[Thing, ...]
    obj: str  # the goal object kind
    recep: str | None  # the target receptacle kind (None when looking under the lamp)
    toggle: str | None  # the lamp kind for look_at_obj_in_light, else None
    template: int  # which of the goal library's two phrasings


def scene_key(scene: Scene) -> tuple:
    """The scene without its goal: room, receptacles (kind, number, open) and objects (kind, number, where)
    — what a held-out test game must not share with a training game (`envs.partition`)."""
    return (scene.room, tuple((r.kind, r.number, r.opened) for r in scene.receptacles),
            tuple((t.kind, t.number, t.place) for t in scene.things))


def goal_key(scene: Scene) -> tuple:
    """The goal alone: task type, goal object kind, target receptacle (or lamp) kind."""
    return (scene.task_type, scene.obj, scene.recep, scene.toggle)


def task_type_of(task_id: int, difficulty: Difficulty) -> str:
    """Task types take turns over ids, so any len(task_types) consecutive ids cover them all."""
    return difficulty.task_types[task_id % len(difficulty.task_types)]


def draw_scene(rng: random.Random, difficulty: Difficulty, task_type: str) -> Scene | None:
    """One random scene for `task_type`; None if this draw cannot host the task."""
    rooms, capability, appliance = TASK_RULES[task_type]
    room = rng.choice(rooms)
    kinds = [k for k in object_kinds(room) if capability is None or capability in capabilities(k)]
    obj = rng.choice(kinds)
    here = receptacle_kinds(room)
    if task_type == LOOK:
        recep, toggle = None, LAMP
        lamp_holders = [k for k in LAMP_HOLDERS if k in here]
        if not lamp_holders:
            return None
        required = [rng.choice(lamp_holders)]
    else:
        toggle = None
        targets = [k for k in here if holds(k, obj) and k != appliance]
        if not targets:
            return None
        recep = rng.choice(targets)
        required = [recep] + ([appliance] if appliance else [])
    sources = [k for k in here if holds(k, obj) and k != recep]
    if not sources:
        return None
    required.append(rng.choice(sources))
    receptacles = _receptacles(rng, difficulty, here, required)
    things = _place_goal_objects(rng, difficulty, receptacles, task_type, obj, recep)
    if things is None:
        return None
    if toggle:
        holders = [i for i, r in enumerate(receptacles) if r.kind in LAMP_HOLDERS]
        things.append(Thing(LAMP, 1, rng.choice(holders)))
    things += _distractors(rng, difficulty, room, receptacles, obj)
    return Scene(task_type, room, tuple(receptacles), tuple(things), obj, recep, toggle, rng.randrange(2))


def _receptacles(rng: random.Random, difficulty: Difficulty, here: list[str], required: list[str]) -> list[Receptacle]:
    """The required kinds plus random ones up to a drawn count, numbered per kind, kinds sorted."""
    wanted = rng.randint(difficulty.min_receptacles, difficulty.max_receptacles)
    kinds = list(dict.fromkeys(required))
    room_max = sum(RECEPTACLE_KINDS[k].max_count for k in here)
    for _ in range(20 * wanted):  # bounded: a room may hold fewer than `wanted`
        if len(kinds) >= min(wanted, room_max):
            break
        kind = rng.choice(here)
        if kinds.count(kind) < RECEPTACLE_KINDS[kind].max_count:
            kinds.append(kind)
    result, numbers = [], {}
    for kind in sorted(kinds):
        numbers[kind] = numbers.get(kind, 0) + 1
        openable = RECEPTACLE_KINDS[kind].openable
        opened = openable and rng.random() >= difficulty.closed_prob
        result.append(Receptacle(kind, numbers[kind], openable, opened))
    return result


def _place_goal_objects(
    rng: random.Random, difficulty: Difficulty, receptacles: list[Receptacle], task_type: str, obj: str,
    recep: str | None,
) -> list[Thing] | None:
    """Copies of the goal object, never in a receptacle of the target kind (the goal starts unmet)."""
    spots = [i for i, r in enumerate(receptacles) if holds(r.kind, obj) and r.kind != recep]
    if not spots:
        return None
    copies = rng.randint(1, difficulty.max_goal_copies)
    if task_type == TWO:
        copies = max(2, copies)
    closed = [i for i in spots if receptacles[i].openable]
    things = []
    for n in range(1, copies + 1):
        pool = closed if closed and rng.random() < difficulty.hidden_prob else spots
        things.append(Thing(obj, n, rng.choice(pool)))
    return things


def _distractors(
    rng: random.Random, difficulty: Difficulty, room: str, receptacles: list[Receptacle], obj: str
) -> list[Thing]:
    """Other objects of the room, each in a receptacle that can hold it."""
    wanted = rng.randint(difficulty.min_distractors, difficulty.max_distractors)
    kinds = [k for k in object_kinds(room) if k != obj and any(holds(r.kind, k) for r in receptacles)]
    numbers: dict[str, int] = {}
    things = []
    for _ in range(wanted if kinds else 0):
        kind = rng.choice(kinds)
        numbers[kind] = numbers.get(kind, 0) + 1
        spot = rng.choice([i for i, r in enumerate(receptacles) if holds(r.kind, kind)])
        things.append(Thing(kind, numbers[kind], spot))
    return things
