"""Task ids of the BFCL env and EnvTuning's three curriculum stages, with a held-out half.

Task ids address the 800 multi-turn entries (4 categories x 200). The four categories are built
from the same 200 scenarios (entry i of miss_func, miss_param and long_context is a variant of
base entry i), so the held-out half is chosen by *scenario index*, the same for every category,
so that no test dialogue is a variant of a train one: even indices train, odd indices test
(the data is grouped by backend, so alternating keeps both halves' API mix alike).

    train ids [0, 400):   id = 100 * c + k  ->  category CATEGORIES[c], index 2k
    test ids  [400, 800): id = 400 + 100 * c + k  ->  category CATEGORIES[c], index 2k + 1

Stages (EnvTuning trained on half of each split and evaluated on the other half):

- stage 3: every category (400 train / 400 test ids);
- stage 2: the base category (100 / 100);
- stage 1: the "format subset": the base entries whose dialogue involves a single backend class
  (34 train / 31 test). Stage 1's reward scores only the reply format and whether tool calls run,
  not task success, so it wants the cheapest episodes that still exercise real tool calls: one
  API means the shortest function list in the prompt and no cross-API bookkeeping, while the
  entries keep their full multi-turn structure, so the format is practised across turns.
"""

from __future__ import annotations

from functools import lru_cache

from agentrl_core.envs.bfcl.data import CATEGORIES, ENTRIES_PER_CATEGORY, Entry, get_entry
from agentrl_core.errors import TaskNotFoundError

PER_CATEGORY_HALF = ENTRIES_PER_CATEGORY // 2  # 100 scenario indices per category and split
TRAIN_IDS = range(0, len(CATEGORIES) * PER_CATEGORY_HALF)  # [0, 400)
TEST_IDS = range(TRAIN_IDS.stop, 2 * TRAIN_IDS.stop)  # [400, 800)
SPLIT_IDS = {"train": TRAIN_IDS, "test": TEST_IDS}
STAGES = (1, 2, 3)
STAGE_CATEGORIES: dict[int, tuple[str, ...]] = {1: ("base",), 2: ("base",), 3: CATEGORIES}


def entry_key(task_id: int) -> tuple[str, int]:
    """(category, scenario index) of a task id; TaskNotFoundError outside [0, 800)."""
    if task_id in TRAIN_IDS:
        offset, parity = task_id - TRAIN_IDS.start, 0
    elif task_id in TEST_IDS:
        offset, parity = task_id - TEST_IDS.start, 1
    else:
        raise TaskNotFoundError(
            f"bfcl has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
            f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
        )
    category, k = divmod(offset, PER_CATEGORY_HALF)
    return CATEGORIES[category], 2 * k + parity


def task_id_of(category: str, index: int) -> int:
    """The task id of entry `multi_turn_<category>_<index>` (inverse of `entry_key`)."""
    if category not in CATEGORIES or not 0 <= index < ENTRIES_PER_CATEGORY:
        raise ValueError(f"no BFCL entry {category!r} #{index}; categories {CATEGORIES}, index 0..199")
    base = TEST_IDS.start if index % 2 else TRAIN_IDS.start
    return base + CATEGORIES.index(category) * PER_CATEGORY_HALF + index // 2


def entry_of(task_id: int) -> Entry:
    """The entry behind a task id."""
    return get_entry(*entry_key(task_id))


def _in_format_subset(entry: Entry) -> bool:
    return len(entry.involved_classes) == 1


@lru_cache(maxsize=None)
def stage_task_ids(stage: int, split: str, categories: tuple[str, ...] | None = None) -> tuple[int, ...]:
    """The task ids of `split` ("train"/"test") used by curriculum `stage` (1, 2 or 3), ascending.

    `categories` narrows stage 3 (or any stage) to some of its categories.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
    if split not in SPLIT_IDS:
        raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
    allowed = STAGE_CATEGORIES[stage]
    if categories is not None:
        unknown = sorted(set(categories) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"unknown categories {unknown}; use some of {', '.join(CATEGORIES)}")
        allowed = tuple(c for c in allowed if c in categories)
    ids = [t for t in SPLIT_IDS[split] if entry_key(t)[0] in allowed]
    if stage == 1:
        ids = [t for t in ids if _in_format_subset(entry_of(t))]
    return tuple(ids)
