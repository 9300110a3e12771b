"""The tuned glibc malloc of the training process (`agentrl/allocator.py`) against glibc's default, in one run.

Runs `bench/bench_speed.py` (one GRPO step of the demo model, repeated) twice per round in fresh
processes, alternating: once with the tuned settings `agentrl run` applies to its training process
(mmap off, trim off, a 1 GiB top pad) and once with glibc's defaults (`AGENTRL_SYSTEM_MALLOC=1`), and
prints each one's median step time, update time and peak RSS, and their ratios.

    .venv/bin/python bench/bench_allocator.py [--rounds 1] [--steps 3] [-- extra bench_speed.py arguments]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.allocator import TUNED  # noqa: E402
from bench._common import median, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402

SETTINGS = ("tuned", "system")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1, help="pairs of runs (tuned, system), alternating")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps per run (median reported)")
    p.add_argument("speed_args", nargs=argparse.REMAINDER, help="-- then arguments for bench_speed.py")
    args = p.parse_args()
    args.speed_args = args.speed_args[1:] if args.speed_args[:1] == ["--"] else args.speed_args
    return args


def child_env(setting: str) -> dict[str, str]:
    """This environment with the tuned malloc variables set ("tuned") or removed ("system")."""
    env = {k: v for k, v in os.environ.items() if k not in TUNED and k != "AGENTRL_SYSTEM_MALLOC"}
    return {**env, **TUNED} if setting == "tuned" else {**env, "AGENTRL_SYSTEM_MALLOC": "1"}


def run_speed(setting: str, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speed.json"
        subprocess.run([sys.executable, str(ROOT / "bench" / "bench_speed.py"), "--no-record", "--steps",
                        str(args.steps), "--json", str(out), *args.speed_args], check=True, env=child_env(setting))
        return json.loads(out.read_text())["figures"]


def main() -> None:
    args = parse()
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for _ in range(args.rounds):
        for setting in SETTINGS:
            runs[setting].append(run_speed(setting, args))
    figures: dict[str, float] = {}
    for setting in SETTINGS:
        for key in ("step_s", "train_s", "rollout_s", "peak_rss_gib"):
            figures[f"{setting}/{key}"] = median([r[key] for r in runs[setting]])
    figures["system_over_tuned_step_s"] = figures["system/step_s"] / figures["tuned/step_s"]
    figures["tuned_over_system_peak_rss"] = figures["tuned/peak_rss_gib"] / figures["system/peak_rss_gib"]
    print_table(f"GRPO step (bench_speed.py, {args.steps} steps), tuned malloc vs glibc default, "
                f"{args.rounds} round(s)", figures)
    save_json(None, {"args": vars(args), "figures": figures, "runs": runs})


if __name__ == "__main__":
    run_recorded("allocator", main)
