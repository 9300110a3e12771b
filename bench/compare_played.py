"""Two models' played episodes on the same tasks, compared: each one's success with its 95% Wilson interval,
and their paired difference (Newcombe's interval, McNemar's exact p) over the tasks both played.

For models that two benchmark runs scored on the same test tasks (e.g. two SFT starts, with and without an
env option), from the trajectory files the runs kept:

    .venv/bin/python bench/compare_played.py A=runs/.../eval/NAME/trajectories.parquet \\
        B=runs/.../eval/OTHER/trajectories.parquet
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl_core.evaluation.stats import compare, format_rate, wilson_interval  # noqa: E402


def successes(path: str) -> dict[int, float]:
    """Task id -> mean success over that task's episodes in one trajectory file."""
    rows = pq.read_table(path, columns=["task_id", "success"]).to_pylist()
    by_task: dict[int, list[float]] = {}
    for row in rows:
        by_task.setdefault(int(row["task_id"]), []).append(float(bool(row["success"])))
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all("=" in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    (name_a, _, path_a), (name_b, _, path_b) = (a.partition("=") for a in argv)
    a, b = successes(path_a), successes(path_b)
    for name, scores, path in ((name_a, a, path_a), (name_b, b, path_b)):
        n, wins = len(scores), sum(scores.values())
        print(f"{name}: {format_rate(wins / n, *wilson_interval(wins, n), n)} ({path})")
    print(compare(a, b, (name_a, name_b)).text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
