"""Which task ids a run uses: one rule for the trainer, the evaluator and the flows.

For `split` in {train, test}, in this order:
1. `env.task_file` (a verl parquet) when it has rows of this env for the split (extra_info.split;
   rows without a split are train tasks). A file with no train rows is an error; a file with no
   test rows leaves the test split to rule 2 or 3.
2. `env.train_ids` / `env.test_ids` (inclusive ranges such as "0-2419").
3. The first `env.train_tasks` / `env.test_tasks` ids of the server's listing (fewer if it has fewer).
Ids from rules 1–2 must all be in the server's listing, else ValueError lists the missing ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl_core.tasksets.ranges import select_ids

if TYPE_CHECKING:
    from agentrl_core.env_service.client import EnvClient

SPLITS = ("train", "test")


def task_file_ids(path: str | Path, env: str, split: str) -> list[int] | None:
    """The ids a verl parquet gives `env`'s `split` (in file order), or None when it has none for test."""
    from agentrl_core.tasksets.verl_parquet import read_verl_parquet

    records = read_verl_parquet(path)
    mine = [r for r in records if r.env == env]
    if not mine:
        found = sorted({r.env for r in records})
        raise ValueError(f"task file {path} has no rows for env {env!r} (env names found: {found}); "
                         "the env is extra_info.env, else interaction_kwargs.name, else data_source")
    ids = [r.task_id for r in mine if (r.split or "train") == split]
    if ids:
        return ids
    if split == "train":
        splits = sorted({r.split or "train" for r in mine})
        raise ValueError(f"task file {path} has no train rows for env {env!r} (splits found: {splits})")
    return None


def resolve_task_ids(env_cfg: Any, client: "EnvClient", split: str) -> list[int]:
    """The task ids of `split` for the env config `env_cfg` (an `EnvConfig`); see the module docstring."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {list(SPLITS)}")
    available = client.task_ids(env_cfg.name, split)
    where = f"the env server's {env_cfg.name!r} {split} split"
    ranges = env_cfg.train_ids if split == "train" else env_cfg.test_ids
    from_file = task_file_ids(env_cfg.task_file, env_cfg.name, split) if env_cfg.task_file is not None else None
    if from_file is not None:
        if ranges is not None:
            raise ValueError(f"env.task_file and env.{split}_ids both choose the {split} tasks: set only one")
        return select_ids(available, from_file, where=where)
    if ranges is not None:
        return select_ids(available, ranges, where=where)
    count = env_cfg.train_tasks if split == "train" else env_cfg.test_tasks
    return list(available[:count])
