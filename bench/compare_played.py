"""Models' played episodes on the same tasks, compared: each one's success with its 95% Wilson interval, and the
first model's paired difference from each of the others (Newcombe's interval, McNemar's exact p) over the tasks
both played. `--json FILE` writes the same as figures (`rows/NAME/{success_rate,success_low,success_high,n}`,
`comparisons/A-B/{diff,low,high,p_value,verdict,...}`), for `bench/record_command.py --json-figures` to keep.

A model's outcomes come from either
- the trajectory file a benchmark run kept (`runs/.../eval/NAME/trajectories.parquet`): task id -> mean success
  over that task's episodes; or
- a recorded results file and one of its arms (`bench/results/RECORD.json#ARM`): the per-task success
  (`tests/ARM/task_success`) that `bench/bench_multiturn.py` records for every model it scores, so a comparison
  can be made again at a commit long after the run's folders are gone. A results file recorded from a modified
  working tree (`git_dirty: true`) is refused: no commit reproduces it, so it cannot back a published figure
  (`--allow-dirty-source` compares it anyway, saying so).

    .venv/bin/python bench/compare_played.py A=runs/.../eval/NAME/trajectories.parquet \\
        B=bench/results/multiturn_household_sharing.json#gigpo-seed0 [C=... ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl_core.evaluation.stats import compare, format_rate, wilson_interval  # noqa: E402
from bench.readme_figures import short_cpu  # noqa: E402
from bench.recorded_tests import SourceError, named_source, recorded_test  # noqa: E402


def successes(path: str) -> dict[int, float]:
    """Task id -> mean success over that task's episodes in one trajectory file."""
    rows = pq.read_table(path, columns=["task_id", "success"]).to_pylist()
    by_task: dict[int, list[float]] = {}
    for row in rows:
        by_task.setdefault(int(row["task_id"]), []).append(float(bool(row["success"])))
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def recorded_successes(path: str, arm: str, allow_dirty: bool = False) -> tuple[dict[int, float], str, dict[str, Any]]:
    """(task id -> success, provenance, the whole results file) of arm `arm` in a recorded results file
    (`tests/ARM/task_success`)."""
    test, doc, provenance = recorded_test(path, arm, allow_dirty)
    if not isinstance(test.get("task_success"), dict):
        raise SourceError(f"{path}: no per-task success of {arm!r} (`tests/{arm}/task_success`)")
    return {int(task): float(value) for task, value in test["task_success"].items()}, provenance, doc


def outcomes(source: str, allow_dirty: bool) -> tuple[dict[int, float], str, dict[str, Any] | None]:
    """(task id -> success, where it came from, its results file or None) of one `NAME=SOURCE` source."""
    path, sep, arm = source.partition("#")
    if sep:
        return recorded_successes(path, arm, allow_dirty)
    if not Path(path).is_file():
        raise SourceError(f"{path}: no such trajectory file (or give RECORD.json#ARM)")
    return successes(path), path, None


def source_facts(where: str, doc: dict[str, Any] | None) -> dict[str, str]:
    """Where a model's outcomes came from and, for a results file, the machine and dtype that played them
    (the comparison itself runs anywhere: a table names the CPU of the run, not of this script)."""
    facts = {"source": where}
    if doc is not None:
        facts["cpu"] = short_cpu(doc)
        if doc.get("compute_dtype"):
            facts["compute_dtype"] = str(doc["compute_dtype"])
    return facts


def rate_row(scores: dict[int, float]) -> dict[str, Any]:
    """One model's success over its tasks with the 95% Wilson interval: {success_rate, success_low, success_high,
    n}, named as bench_multiturn names a scored model's (and as bench/recompare.py reads `rows/NAME/success_rate`)."""
    n, wins = len(scores), sum(scores.values())
    low, high = wilson_interval(wins, n)
    return {"success_rate": wins / n, "success_low": low, "success_high": high, "n": n}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", type=named_source, metavar="NAME=SOURCE",
                   help="a trajectories.parquet file, or RECORD.json#ARM; the first is compared with each other one")
    p.add_argument("--allow-dirty-source", action="store_true",
                   help="compare a results file recorded from a modified working tree (its line says so)")
    p.add_argument("--json", metavar="FILE", help="also write the rows and comparisons to this JSON file")
    args = p.parse_args(argv)
    if len(args.models) < 2:
        p.error("give at least two models (NAME=SOURCE), the first compared with each of the others")
    names = [name for name, _ in args.models]
    if len(set(names)) < len(names):
        p.error(f"model names must differ, got {names}")
    try:
        played = [outcomes(source, args.allow_dirty_source) for _, source in args.models]
    except SourceError as exc:
        print(f"compare_played: {exc}", file=sys.stderr)
        return 2
    rows: dict[str, dict[str, Any]] = {}
    for name, (scores, where, doc) in zip(names, played):
        rows[name] = rate_row(scores) | source_facts(where, doc)
        r = rows[name]
        print(f"{name}: {format_rate(r['success_rate'], r['success_low'], r['success_high'], r['n'])} ({where})")
    comparisons = {}
    for name, (scores, _, _) in zip(names[1:], played[1:]):
        comparison = compare(played[0][0], scores, (names[0], name))
        comparisons[f"{names[0]}-{name}"] = comparison.to_dict()
        print(comparison.text())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "comparisons": comparisons}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
