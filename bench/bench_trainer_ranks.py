"""One trainer actor against a trainer sharded over N Ray actors (distributed.trainer_workers), side by side.

Each arm runs the same GRPO stage (`--recipe`, default household_grpo, the embedded 135M model, `--steps`
steps, same seed) on a local Ray with one rollout worker and DeepSpeed ZeRO-`--zero-stage` over N trainer
actors (gloo on the CPU; one CPU each), for each N of `--ranks` (default 1 2). Training is in float32: ZeRO's
bf16 path is for GPUs. Every arm trains micro-batches of `--micro-batch-tokens` (what ZeRO does not shard:
each rank's activations; with DeepSpeed no memory plan sizes them), with an entropy bonus (0.01) so that every
step updates the weights even where the untrained model's groups carry no reward spread. Prints per arm: the stage's wall minutes, the medians of the step's, the rollout's
and the update's seconds (steps 2..n: step 1 holds DeepSpeed's start), and each trainer actor's peak
resident memory (`memory/trainer_peak_rss_gib/rank_k`), with the first arm as the baseline.

On one machine the ranks share its cores and its memory: the figure to read is memory per actor (what ZeRO-3
shards: parameters, gradients and the optimizer's state each 1/N per rank, plus what every rank holds whole
while it runs a layer), not speed, which needs one machine (or GPU) per rank.

    .venv/bin/python bench/bench_trainer_ranks.py [--ranks 1 2] [--steps 3] [--zero-stage 3]
        [--micro-batch-tokens 1024] [--root runs/bench-trainer-ranks] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table  # noqa: E402
from bench.recording import current, run_recorded  # noqa: E402
from agentrl_core.env_service import launch_server  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402

MEDIANS = {"step_s": "time/step_s", "rollout_s": "time/rollout_s", "update_s": "time/train_s"}
"""Per-step seconds shown as medians over steps 2..n."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="household_grpo")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="trainer actors of each arm")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps of each arm (at least 2)")
    p.add_argument("--zero-stage", type=int, choices=(2, 3), default=3)
    p.add_argument("--micro-batch-tokens", type=int, default=1024,
                   help="trainer.micro_batch_tokens of every arm (the same activations per rank: what ZeRO does not shard)")
    p.add_argument("--root", default="runs/bench-trainer-ranks")
    p.add_argument("overrides", nargs="*", help="recipe overrides, KEY=VALUE")
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be at least 2 (step 1 holds DeepSpeed's start)")
    return args


def arm_recipe(args: argparse.Namespace, ranks: int, root: Path):
    return load_recipe(args.recipe, [
        f"run.root={root}", f"run.name=ranks-{ranks}", f"trainer.steps={args.steps}", f"trainer.save_every={args.steps}",
        "model.compute_dtype=float32", "distributed.backend=ray", "distributed.rollout_workers=1",
        f"distributed.trainer_workers={ranks}", "trainer.backend=deepspeed", "trainer.deepspeed.allow_cpu=true",
        "trainer.deepspeed.bf16=false", f"trainer.deepspeed.zero_stage={args.zero_stage}",
        f"trainer.micro_batch_tokens={args.micro_batch_tokens}", "algorithm.entropy_coef=0.01", *args.overrides])


def run_arm(args: argparse.Namespace, ranks: int, url: str) -> dict[str, float]:
    """One arm's GRPO stage; its figures from the stage's metrics.jsonl."""
    root = Path(args.root) / f"ranks-{ranks}"
    shutil.rmtree(root, ignore_errors=True)
    cfg = arm_recipe(args, ranks, root)
    stage = root / "grpo"
    start = time.perf_counter()
    train_grpo(cfg, init_model=resolve_model(cfg.model.name), env_url=url, stage_dir=stage)
    minutes = (time.perf_counter() - start) / 60
    steps = list(read_metrics(stage / "metrics.jsonl"))
    later = steps[1:]
    figures = {"wall_min": minutes} | {
        name: statistics.median(m[key] for m in later if key in m) for name, key in MEDIANS.items()
        if any(key in m for m in later)}
    for rank in range(ranks):  # one trainer logs its peak as memory/peak_rss_gib only
        key = f"memory/trainer_peak_rss_gib/rank_{rank}" if ranks > 1 else "memory/peak_rss_gib"
        figures[f"peak_gib_rank_{rank}"] = max(m.get(key, 0.0) for m in steps)
    figures["peak_gib_per_actor_max"] = max(figures[f"peak_gib_rank_{r}"] for r in range(ranks))
    figures["peak_gib_all_actors"] = sum(figures[f"peak_gib_rank_{r}"] for r in range(ranks))
    figures["loss_step_1"] = steps[0].get("loss", float("nan"))
    return figures


def main() -> None:
    args = parse()
    print(describe_cpu())
    cfg = arm_recipe(args, args.ranks[0], Path(args.root))
    results: dict[int, dict[str, float]] = {}
    with launch_server([cfg.env.name], startup_timeout=180) as server:
        for ranks in args.ranks:
            print(f"--- {ranks} trainer actor(s), ZeRO-{args.zero_stage} ---", flush=True)
            results[ranks] = run_arm(args, ranks, server.url)
            print_table(f"N = {ranks}", results[ranks])
    base = results[args.ranks[0]]
    for ranks in args.ranks[1:]:
        shown = {k: v for k, v in results[ranks].items() if k in base}
        print_table(f"N = {ranks} against N = {args.ranks[0]}", shown, base)
    current().report({f"n{ranks}/{k}": v for ranks, figs in results.items() for k, v in figs.items()},
                        recipe=args.recipe, zero_stage=args.zero_stage)


if __name__ == "__main__":
    run_recorded("trainer_ranks", main)
