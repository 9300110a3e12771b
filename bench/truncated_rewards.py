"""How many of a GRPO run's training episodes were cut off by the rollout, and what reward they kept.

An environment that gives its reward once, at the end (BFCL), never gave it to an episode that the rollout ended
first (`env.max_turns` replies, or `rollout.max_context_tokens`): such an episode scored 0 whatever it had earned,
until the rollout credited the environment's `info["reward_so_far"]` to it (`agentrl_core.envs.reward_so_far`).
With that, "cut off and scored 0" counts only episodes that had earned nothing.
For each run folder this reads the rollout logs (`RUN/grpo/rollout_log/step_*.parquet`) and prints, over every
training episode: how many were cut off (and how many at the context limit), how many of those scored 0, how many
episodes passed part of their task by their own metric (`episode_metrics[METRIC] > 0`, BFCL's `progress` by
default), and how many of those were cut off and scored 0.

    .venv/bin/python bench/truncated_rewards.py runs/bfcl-learn-stage3-seed0 [runs/...] [--metric progress]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agentrl_core.envs.episode_metrics import EPISODE_METRICS  # noqa: E402
from agentrl_core.rollout.io import read_trajectories  # noqa: E402
from agentrl_core.rollout.trajectory import Trajectory  # noqa: E402


@dataclass
class Counts:
    episodes: int = 0
    cut_off: int = 0
    at_context_limit: int = 0
    cut_off_scored_0: int = 0
    earned: int = 0
    earned_cut_off_scored_0: int = 0

    def add(self, t: Trajectory, metric: str) -> None:
        earned = float(t.extra.get(EPISODE_METRICS, {}).get(metric, 0.0)) > 0.0
        lost = t.truncated and t.reward == 0.0
        self.episodes += 1
        self.cut_off += t.truncated
        self.at_context_limit += t.extra.get("truncated_by") == "context"
        self.cut_off_scored_0 += lost
        self.earned += earned
        self.earned_cut_off_scored_0 += earned and lost


def count(run: Path, metric: str) -> Counts:
    """The counts over every step's rollout log of `run`; FileNotFoundError when it has none."""
    files = sorted((run / "grpo" / "rollout_log").glob("step_*.parquet"))
    if not files:
        raise FileNotFoundError(f"{run} has no rollout logs ({run}/grpo/rollout_log/step_*.parquet): "
                                "give the folder of a GRPO run (runs/NAME)")
    counts = Counts()
    for path in files:
        for t in read_trajectories(path):
            counts.add(t, metric)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="GRPO run folders (runs/NAME)")
    p.add_argument("--metric", default="progress", help="the episode metric that says an episode earned reward")
    args = p.parse_args(argv)
    for run in args.runs:
        try:
            c = count(run, args.metric)
        except FileNotFoundError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{run}: {c.episodes} training episodes, {c.cut_off} cut off "
              f"({c.at_context_limit} by the rollout at the context limit), {c.cut_off_scored_0} of them scored 0; "
              f"{c.earned} with {args.metric} > 0, {c.earned_cut_off_scored_0} of those cut off and scored 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
