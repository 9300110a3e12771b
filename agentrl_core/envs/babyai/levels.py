"""The 40 BabyAI levels in AgentGym's order, and the task id -> (level, seed) numbering.

AgentGym (agentenv-babyai) numbers its tasks so that task `idx` plays level
`LEVELS[idx % 40]` with minigrid seed `idx // 40`; we keep that numbering, so an AgentGym task
id names the same level and layout here. Splits are disjoint seed ranges:
train = ids [0, 40_000) (seeds 0..999 of every level), test = ids [40_000, 41_000)
(seeds 1000..1024 of every level).

Each level is built from its minigrid class and keyword arguments directly (what
`gymnasium.make(level_id)` would build, without wrappers or the gymnasium registry, which
gymnasium >= 1.0 no longer fills from minigrid's entry point).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from agentrl_core.errors import TaskNotFoundError


@dataclass(frozen=True)
class Level:
    """One BabyAI level: its gymnasium id and the minigrid class + kwargs that build it."""

    env_id: str
    cls: str  # a class name in minigrid.envs.babyai
    kwargs: dict[str, Any] = field(default_factory=dict)


def _level(name: str, cls: str | None = None, **kwargs: Any) -> Level:
    return Level(f"BabyAI-{name}-v0", cls or name, kwargs)


# AgentGym's `all_levels` (1-based there, 0-based here), with minigrid 2.3's registrations.
LEVELS: tuple[Level, ...] = (
    _level("GoToRedBallGrey"),
    _level("GoToRedBall"),
    _level("GoToRedBallNoDists"),
    _level("GoToObjS6", "GoToObj", room_size=4),
    _level("GoToLocalS8N7", "GoToLocal", room_size=8, num_dists=7),
    _level("GoToObjMazeS7", "GoTo", num_dists=1, room_size=7),
    _level("GoToImpUnlock"),
    _level("GoToSeqS5R2", "GoToSeq", room_size=5, num_rows=2, num_cols=2, num_dists=4),
    _level("GoToRedBlueBall"),
    _level("GoToDoor"),
    _level("GoToObjDoor"),
    _level("Open"),
    _level("OpenRedDoor"),
    _level("OpenDoorLoc", "OpenDoor", select_by="loc"),
    _level("OpenRedBlueDoorsDebug", "OpenTwoDoors", first_color="red", second_color="blue", strict=True),
    _level("OpenDoorsOrderN4Debug", "OpenDoorsOrder", debug=True, num_doors=4),
    _level("Pickup"),
    _level("UnblockPickup"),
    _level("PickupLoc"),
    _level("PickupDistDebug", "PickupDist", debug=True),
    _level("PickupAbove"),
    _level("PutNextLocalS6N4", "PutNextLocal", room_size=6, num_objs=4),
    _level("PutNextS7N4Carrying", "PutNext", room_size=7, objs_per_room=4, start_carrying=True),
    _level("Unlock"),
    _level("UnlockLocalDist", "UnlockLocal", distractors=True),
    _level("KeyInBox"),
    _level("UnlockPickupDist", "UnlockPickup", distractors=True),
    _level("BlockedUnlockPickup"),
    _level("UnlockToUnlock"),
    _level("ActionObjDoor"),
    _level("FindObjS7", "FindObjS5", room_size=7),
    _level("KeyCorridorS6R3", "KeyCorridor", room_size=6, num_rows=3),
    _level("OneRoomS20", "OneRoomS8", room_size=20),
    _level("MoveTwoAcrossS8N9", "MoveTwoAcross", room_size=8, objs_per_room=9),
    _level("SynthS5R2", "Synth", room_size=5, num_rows=2),
    _level("SynthLoc"),
    _level("SynthSeq"),
    _level("MiniBossLevel"),
    _level("BossLevel"),
    _level("BossLevelNoUnlock"),
)
NUM_LEVELS = len(LEVELS)  # 40
SEEDS_TRAIN = 1000
SEEDS_TEST = 25
TRAIN_IDS = range(NUM_LEVELS * SEEDS_TRAIN)  # [0, 40000)
TEST_IDS = range(TRAIN_IDS.stop, TRAIN_IDS.stop + NUM_LEVELS * SEEDS_TEST)  # [40000, 41000)


def level_of(task_id: int) -> tuple[Level, int]:
    """(level, minigrid seed) of a task: level = LEVELS[id % 40], seed = id // 40 (AgentGym's rule)."""
    if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
        raise TaskNotFoundError(
            f"babyai has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
            f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop}) (level = id % 40, seed = id // 40)"
        )
    return LEVELS[task_id % NUM_LEVELS], task_id // NUM_LEVELS


def build(level: Level) -> Any:
    """A new minigrid env of `level` (imports minigrid lazily; no wrappers, no rendering)."""
    module = importlib.import_module("minigrid.envs.babyai")
    return getattr(module, level.cls)(**level.kwargs)
