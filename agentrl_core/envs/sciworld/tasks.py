"""ScienceWorld's task table and the flat task-id space (AgentGym's `data_idx`).

AgentGym's SciWorld server (agentenv-sciworld, scienceworld 1.2.3) numbers its games by walking
the tasks in `scienceworld/tasks.json` order, skipping seven task codes, and listing every
variation of each task:

    data_idx = offset(task) + variation,   offset(task) = sum of the variation counts of the
                                           included tasks before it.

That gives ids [0, 4639) over 23 tasks; ids here mean the same (task, variation). The seven tasks
AgentGym skips (grow-plant, grow-fruit, the three inclined-plane tasks, the two Mendelian-genetics
tasks; the last five often have gold paths of 100-740 steps) follow, by the same rule, as ids
[4639, 7207).

Splits are ScienceWorld's own: per task the variations [0, train) are "train", [train, train+dev)
"dev" and [train+dev, variations) "test" (`get_variations_train/dev/test`, contiguous for every
task in 1.2.3). A split's ids are the union over tasks of offset(task) + those variations, so the
splits are disjoint by construction. The counts below were read from the 1.2.3 jar; a test checks
them against the jar.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from typing import Literal

from agentrl_core.errors import TaskNotFoundError

SPLITS = ("train", "dev", "test")
TaskSet = Literal["agentgym", "all"]


@dataclass(frozen=True)
class TaskSpec:
    """One ScienceWorld task: its code ("4-1"), engine name, variation count and split sizes."""

    code: str
    name: str
    variations: int
    train: int  # variations [0, train) are ScienceWorld's train split
    dev: int  # [train, train + dev) its dev split; the rest [train + dev, variations) its test split

    def split_range(self, split: str) -> range:
        """The variations of this task in `split` ("train", "dev" or "test")."""
        bounds = {"train": (0, self.train), "dev": (self.train, self.train + self.dev),
                  "test": (self.train + self.dev, self.variations)}
        if split not in bounds:
            raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        return range(*bounds[split])

    def split_of(self, variation: int) -> str:
        """The split that holds `variation`."""
        return next(s for s in SPLITS if variation in self.split_range(s))


# tasks.json order (scienceworld 1.2.3): code, name, variations, train, dev
TASKS: tuple[TaskSpec, ...] = tuple(TaskSpec(*row) for row in (
    ("1-1", "boil", 30, 14, 7),
    ("1-2", "melt", 30, 14, 7),
    ("1-3", "freeze", 30, 14, 7),
    ("1-4", "change-the-state-of-matter-of", 30, 14, 7),
    ("2-1", "use-thermometer", 540, 270, 135),
    ("2-2", "measure-melting-point-known-substance", 436, 218, 109),
    ("2-3", "measure-melting-point-unknown-substance", 300, 150, 75),
    ("3-1", "power-component", 20, 10, 5),
    ("3-2", "power-component-renewable-vs-nonrenewable-energy", 20, 10, 5),
    ("3-3", "test-conductivity", 900, 450, 225),
    ("3-4", "test-conductivity-of-unknown-substances", 600, 300, 150),
    ("4-1", "find-living-thing", 300, 150, 75),
    ("4-2", "find-non-living-thing", 300, 150, 75),
    ("4-3", "find-plant", 300, 150, 75),
    ("4-4", "find-animal", 300, 150, 75),
    ("5-1", "grow-plant", 126, 62, 31),
    ("5-2", "grow-fruit", 126, 62, 31),
    ("6-1", "chemistry-mix", 32, 16, 8),
    ("6-2", "chemistry-mix-paint-secondary-color", 36, 18, 9),
    ("6-3", "chemistry-mix-paint-tertiary-color", 36, 18, 9),
    ("7-1", "lifespan-longest-lived", 125, 62, 31),
    ("7-2", "lifespan-shortest-lived", 125, 62, 31),
    ("7-3", "lifespan-longest-lived-then-shortest-lived", 125, 62, 31),
    ("8-1", "identify-life-stages-1", 14, 6, 3),
    ("8-2", "identify-life-stages-2", 10, 4, 2),
    ("9-1", "inclined-plane-determine-angle", 168, 84, 42),
    ("9-2", "inclined-plane-friction-named-surfaces", 1386, 692, 346),
    ("9-3", "inclined-plane-friction-unnamed-surfaces", 162, 80, 40),
    ("10-1", "mendelian-genetics-known-plant", 120, 60, 30),
    ("10-2", "mendelian-genetics-unknown-plant", 480, 240, 120),
))

# The task codes AgentGym's server leaves out of its games list (agentenv_sciworld/environment.py).
AGENTGYM_EXCLUDED = frozenset({"5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2"})

# Id order: AgentGym's 23 tasks first (so ids match its data_idx), then the seven it skips.
ORDER: tuple[TaskSpec, ...] = (
    tuple(t for t in TASKS if t.code not in AGENTGYM_EXCLUDED) + tuple(t for t in TASKS if t.code in AGENTGYM_EXCLUDED)
)
OFFSETS: tuple[int, ...] = (0, *accumulate(t.variations for t in ORDER))  # OFFSETS[i] = first id of ORDER[i]
AGENTGYM_SIZE = OFFSETS[len(TASKS) - len(AGENTGYM_EXCLUDED)]  # 4639: AgentGym's data_idx range
TOTAL = OFFSETS[-1]  # 7207 (task, variation) pairs
_BY_NAME = {t.name: i for i, t in enumerate(ORDER)}


def locate(task_id: int) -> tuple[TaskSpec, int]:
    """(task, variation) of a flat id: the inverse of `task_id_of`."""
    if not 0 <= task_id < TOTAL:
        raise TaskNotFoundError(f"sciworld has no task {task_id}: ids are [0, {TOTAL})")
    i = bisect_right(OFFSETS, task_id) - 1
    return ORDER[i], task_id - OFFSETS[i]


def task_id_of(name: str, variation: int) -> int:
    """The flat id of variation `variation` of the task called `name` (e.g. "find-animal")."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown ScienceWorld task {name!r}; tasks: {', '.join(t.name for t in TASKS)}")
    task = ORDER[_BY_NAME[name]]
    if not 0 <= variation < task.variations:
        raise ValueError(f"task {name!r} has variations [0, {task.variations}), got {variation}")
    return OFFSETS[_BY_NAME[name]] + variation


def tasks_in(task_set: TaskSet) -> tuple[TaskSpec, ...]:
    """The tasks of a task set: "agentgym" (its 23) or "all" (the 30 of ScienceWorld)."""
    if task_set == "agentgym":
        return ORDER[: len(TASKS) - len(AGENTGYM_EXCLUDED)]
    if task_set == "all":
        return ORDER
    raise ValueError(f"unknown task_set {task_set!r}; use 'agentgym' (AgentGym's 23 tasks) or 'all' (30 tasks)")


def split_ids(task_set: TaskSet) -> dict[str, tuple[int, ...]]:
    """Every split's ids (ascending) for a task set; the splits are disjoint and cover the set."""
    return dict(_split_ids(task_set))


@cache
def _split_ids(task_set: TaskSet) -> tuple[tuple[str, tuple[int, ...]], ...]:
    tasks = tasks_in(task_set)
    return tuple(
        (split, tuple(task_id_of(t.name, v) for t in tasks for v in t.split_range(split))) for split in SPLITS
    )
