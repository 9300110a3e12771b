"""Held out in content: per recipe, how many test tasks share each level of content with a training task.

Runs `agentrl_core.evaluation.overlap` on each recipe (with the given overrides) and prints, per level
(math: arithmetic fact, story; household and ALFWorld: goal, scene, scene with goal), how many test
tasks share their key with some training task, of how many. ALFWorld's generated games are made
(and cached) on first use: the first run plans all 2,620 of them (minutes).

    .venv/bin/python bench/bench_overlap.py [--recipes math_learn household_grpo alfworld_grpo] [--test-tasks 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.evaluation.overlap import recipe_overlap  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", nargs="+", default=["math_learn", "household_grpo", "alfworld_grpo"])
    p.add_argument("--test-tasks", type=int, default=200, help="env.test_tasks for every recipe (the held-out set)")
    return p.parse_args()


def main() -> None:
    args = parse()
    figures: dict[str, float] = {}
    for recipe in args.recipes:
        for row in recipe_overlap(recipe, [f"env.test_tasks={args.test_tasks}"]):
            prefix = f"{recipe}/{row.level}"
            figures |= {f"{prefix}/shared": row.shared, f"{prefix}/n_test": row.n_test, f"{prefix}/share": row.share,
                        f"{prefix}/distinct_train_keys": row.distinct_train_keys}
    print_table(f"content shared by {args.test_tasks} test tasks with training, per recipe and level", figures)
    save_json(None, {"args": vars(args), "figures": figures})


if __name__ == "__main__":
    run_recorded("overlap", main)
