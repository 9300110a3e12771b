"""Household task generation: task id -> a seeded, solvable scene (rooms, receptacles, objects, goal)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from agentrl_core.envs.household.expert import search
from agentrl_core.envs.household.world import (
    APPLIANCE_FOR,
    CAPABILITIES,
    KITCHEN,
    LIVING_ROOM,
    MIDDLE,
    RECEPTACLE_KINDS,
    Goal,
    Receptacle,
    Scene,
    State,
)
from agentrl_core.envs.partition import fits_part

TASK_TYPES = ("put", "clean", "heat", "cool")
TRAIN_IDS = range(0, 10_000)
TEST_IDS = range(10_000, 10_500)


@dataclass(frozen=True)
class Difficulty:
    """Knobs of the generator (hashable, so scenes can be cached per difficulty)."""

    two_room_prob: float = 0.2
    min_receptacles: int = 3
    max_receptacles: int = 6
    min_objects: int = 2
    max_objects: int = 5
    task_types: tuple[str, ...] = TASK_TYPES
    max_plan: int = 12  # every scene is solvable in at most this many steps

    def validate(self) -> None:
        """Raise ValueError naming the bad knob."""
        if not 0.0 <= self.two_room_prob <= 1.0:
            raise ValueError(f"two_room_prob must be in [0, 1], got {self.two_room_prob}")
        if not 3 <= self.min_receptacles <= self.max_receptacles <= 8:
            raise ValueError("need 3 <= min_receptacles <= max_receptacles <= 8")
        if not 1 <= self.min_objects <= self.max_objects <= 8:
            raise ValueError("need 1 <= min_objects <= max_objects <= 8")
        unknown = set(self.task_types) - set(TASK_TYPES)
        if unknown or not self.task_types:
            raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {self.task_types}")
        if self.max_plan < 4:
            raise ValueError(f"max_steps must be >= 4 for tasks to fit, got {self.max_plan}")


def _room_receptacles(rng: random.Random, room: str, required: list[str], count: int) -> list[str]:
    """Kinds of the receptacles of one room: the required ones plus random others."""
    kinds = list(required)
    pool = sorted(k for k, spec in RECEPTACLE_KINDS.items() if room in spec.rooms)
    while len(kinds) < count:
        kind = rng.choice(pool)
        if kinds.count(kind) < RECEPTACLE_KINDS[kind].max_count:
            kinds.append(kind)
    return kinds


def _layout(rng: random.Random, diff: Difficulty, task_type: str) -> tuple[tuple[str, ...], tuple[Receptacle, ...]]:
    """Rooms and numbered receptacles (numbering runs across the house, like ALFWorld)."""
    rooms = (KITCHEN, LIVING_ROOM) if rng.random() < diff.two_room_prob else (KITCHEN,)
    required = ["countertop"] + ([APPLIANCE_FOR[task_type]] if task_type != "put" else [])
    per_room = [
        _room_receptacles(
            rng, room, required if room == KITCHEN else [], rng.randint(diff.min_receptacles, diff.max_receptacles)
        )
        for room in rooms
    ]
    numbered: Counter[str] = Counter()
    receptacles = []
    for k, kinds in enumerate(per_room):
        for kind in sorted(kinds):
            numbered[kind] += 1
            receptacles.append(Receptacle(f"{kind} {numbered[kind]}", kind, k))
    return rooms, tuple(receptacles)


def _pick_goal(rng: random.Random, receptacles: tuple[Receptacle, ...], task_type: str) -> tuple[Goal, int] | None:
    """A goal (kind, target, need) and a start receptacle for one goal object; None if none fits."""
    kinds = sorted(set().union(*(r.spec.holds for r in receptacles)))
    if task_type != "put":
        kinds = [k for k in kinds if k in CAPABILITIES[task_type]]
    rng.shuffle(kinds)
    for kind in kinds:
        holders = [i for i, r in enumerate(receptacles) if kind in r.spec.holds]
        # a transformed object goes to a plain receptacle, not back into an appliance
        targets = [i for i in holders if task_type == "put" or not receptacles[i].spec.appliance]
        if targets and len(holders) >= 2:
            target = rng.choice(targets)
            start = rng.choice([i for i in holders if i != target])
            return Goal(kind, target, "" if task_type == "put" else task_type), start
    return None


def _objects(
    rng: random.Random, diff: Difficulty, receptacles: tuple[Receptacle, ...], goal: Goal, start: int
) -> tuple[list[str], list[int]]:
    """Kinds and places of the goal object plus distractors (none of the goal kind in the target)."""
    kinds, places = [goal.kind], [start]
    placeable = sorted(set().union(*(r.spec.holds for r in receptacles)))
    for _ in range(rng.randint(diff.min_objects, diff.max_objects) - 1):
        kind = rng.choice(placeable)
        spots = [
            i for i, r in enumerate(receptacles)
            if kind in r.spec.holds and not (kind == goal.kind and i == goal.target)
        ]
        if spots:
            kinds.append(kind)
            places.append(rng.choice(spots))
    return kinds, places


def draw_scene(rng: random.Random, diff: Difficulty) -> Scene | None:
    """One random scene (not yet checked for plan length); None if the draw did not fit."""
    task_type = rng.choice(diff.task_types)
    rooms, receptacles = _layout(rng, diff, task_type)
    picked = _pick_goal(rng, receptacles, task_type)
    if picked is None:
        return None
    goal, start_at = picked
    kinds, places = _objects(rng, diff, receptacles, goal, start_at)
    numbered: Counter[str] = Counter()
    names = []
    for kind in kinds:
        numbered[kind] += 1
        names.append(f"{kind} {numbered[kind]}")
    # list objects in name order so text never depends on the drawing order
    order = sorted(range(len(kinds)), key=lambda i: names[i])
    objects = tuple((names[i], kinds[i]) for i in order)
    room = rng.randrange(len(rooms))
    start = State(room, MIDDLE, 0, tuple(places[i] for i in order), (0,) * len(kinds))
    return Scene(rooms, receptacles, objects, start, goal, task_type)


def scene_key(scene: Scene) -> tuple:
    """What makes a scene the same scene: rooms, receptacles, objects and where everything starts (no goal)."""
    return (scene.rooms, scene.receptacles, scene.objects, scene.start)


@lru_cache(maxsize=2048)
def make_scene(task_id: int, diff: Difficulty) -> tuple[Scene, int]:
    """The scene of `task_id` and its shortest plan length (1 <= length <= diff.max_plan).

    Test ids draw only scenes of the test part of the scene space and train ids only of the train
    part (`envs.partition`), so no test scene is ever a training scene, whatever the ids.
    """
    rng = random.Random(f"household-v1:{task_id}")
    held_out = task_id in TEST_IDS
    for _ in range(1000):
        scene = draw_scene(rng, diff)
        if scene is None or not fits_part(scene_key(scene), held_out):
            continue
        plan = search(scene, scene.start, limit=diff.max_plan)
        if plan:  # [] would mean the goal already holds; None that it is out of reach
            return scene, len(plan)
    raise RuntimeError(f"household: could not generate task {task_id} with {diff}")
