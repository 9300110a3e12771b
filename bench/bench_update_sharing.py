"""Time of a GRPO update on real multi-turn rollouts: rows run whole, the prompt shared, or repeated turns shared.

A near-deterministic policy repeats itself: in a household group of 8 most samples take the same first
actions and see the same observations. `trainer.shared_prefix` runs what the samples of a group share once
(`agentrl_core/training/shared_prefix.py`). This bench takes logged rollouts (default: two real household
GiGPO steps, `bench/data/household_rollouts/`) and runs the same update — same weights, same optimizer, the
recipe's estimator — three ways, in turn, `--repeats` times:

- `plain`: every row runs whole (`trainer.shared_prefix: false`);
- `prompt`: each group's common prompt runs once, up to its first model token (what shared_prefix did
  before it shared turns: the peer);
- `turns`: sub-groups of rows share their longest common prefix, the model's own tokens included (now).

It prints, per way: the tokens the forward runs, the update's wall time (median) and its ratio to the
others, and the loss and gradient norm (which must agree up to rounding: the same update, less work).

    .venv/bin/python bench/bench_update_sharing.py [--rollout F.parquet ...] [--repeats 2] [--mini-batches 1]
        [rollout.sampling.temperature=0.7 ...]   (the runs that logged the default rollouts sampled at T = 0.7)
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench._common import median, peak_rss_gib, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models import load_model, resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import choose_compute_dtype  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.rollout.io import read_trajectories  # noqa: E402
from agentrl_core.rollout.trajectory import Trajectory  # noqa: E402
from agentrl_core.training import policy_update as pu  # noqa: E402
from agentrl_core.training import shared_prefix as sp  # noqa: E402
from agentrl_core.training.optim import build_optimizer  # noqa: E402
from agentrl_core.training.step_context import train_temperature  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "household_rollouts"
WAYS = ("plain", "prompt", "turns")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout", dest="rollouts", type=Path, action="append",
                   help="a logged step (repeat the flag); default: the files of bench/data/household_rollouts")
    p.add_argument("--recipe", default="household_learn", help="the estimator, loss and lr come from it")
    p.add_argument("--model", default=None, help="default: the recipe's model")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--mini-batches", type=int, default=1, help="trainer.ppo_mini_batches of the update")
    p.add_argument("--micro-batch-tokens", type=int, default=4096)
    p.add_argument("--compute-dtype", dest="autocast", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("overrides", nargs="*", help="recipe overrides, e.g. rollout.sampling.temperature=0.7 (the "
                   "update's log-prob temperature) trainer.optim.lr=1e-5")
    return p.parse_args(argv)


def load_rollouts(files: Sequence[Path]) -> list[Trajectory]:
    """The logged episodes of `files`, each file's groups numbered apart from the others'."""
    out: list[Trajectory] = []
    for f in files:
        offset = 1 + max((t.group for t in out), default=-1)
        for t in read_trajectories(f):
            t.group += offset
            out.append(t)
    return out


def prompt_only_prefixes(trajs: Sequence[Trajectory], index: Sequence[int]) -> list[sp.PrefixGroup]:
    """The peer's plan: each GRPO group's rows share their common prefix up to the token that predicts their
    first model token, nothing after it."""
    by_group: dict[int, list[int]] = {}
    for row, i in enumerate(index):
        by_group.setdefault(trajs[i].group, []).append(row)
    out = []
    for rows in by_group.values():
        seqs = [trajs[index[r]].token_ids for r in rows]
        common = min((sp._common_length(seqs[0], s) for s in seqs[1:]), default=0)
        first = min(max(0, trajs[index[r]].loss_mask.index(1) - 1) if 1 in trajs[index[r]].loss_mask
                    else len(seqs[0]) for r in rows)
        length = min(common, first)
        out.append(sp.PrefixGroup(tuple(rows), length if len(rows) > 1 and length >= sp.MIN_SHARED else 0))
    return out


def forward_tokens(trajs: Sequence[Trajectory], batches: list[Any]) -> int:
    """Tokens the forward runs: `shared_prefix.planned_tokens` per micro-batch with prefix groups; micro-batches
    without groups run padded whole."""
    return sum(sp.planned_tokens(trajs, mb.index, mb.prefixes) if mb.prefixes else int(mb.input_ids.numel())
               for mb in batches)


def one_update(way: str, trajs: list[Trajectory], model0: Any, args: argparse.Namespace, cfg: Any) -> dict[str, float]:
    """The recipe's update of `trajs` from the weights of `model0`, planned `way`; its time and results."""
    model = copy.deepcopy(model0)
    model.train()
    opt, sched = build_optimizer(model, cfg.trainer.optim, total_steps=args.mini_batches)
    ctx = pu.UpdateContext(model, opt, sched, cfg.algorithm, cfg.trainer.optim.grad_clip, args.micro_batch_tokens,
                           0, temperature=train_temperature(cfg), autocast=args.autocast, shared_prefix=way != "plain")
    planned: list[Any] = []
    real_plan = pu.plan_batches

    def plan(c: Any, ts: Sequence[Trajectory]) -> list[Any]:
        batches = real_plan(c, ts)
        if way == "prompt":
            for mb in batches:
                mb.prefixes = prompt_only_prefixes(ts, mb.index)
        planned.append((ts, batches))
        return batches

    pu.plan_batches = plan
    try:
        t0 = time.perf_counter()
        metrics = pu.policy_update(ctx, trajs, mini_batches=args.mini_batches)
        seconds = time.perf_counter() - t0
    finally:
        pu.plan_batches = real_plan
    tokens = sum(forward_tokens(ts, batches) for ts, batches in planned)
    return {"update_s": seconds, "forward_tokens": float(tokens), "loss": metrics["loss"],
            "grad_norm": metrics["grad_norm"]}


def run_ways(trajs: list[Trajectory], model0: Any, args: argparse.Namespace, cfg: Any,
             update: Callable[..., dict[str, float]] = one_update) -> dict[str, list[dict[str, float]]]:
    """Each way once per repeat, interleaved (plain, prompt, turns, plain, ...), so load on a shared machine
    falls on all of them alike."""
    runs: dict[str, list[dict[str, float]]] = {w: [] for w in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            runs[way].append(update(way, trajs, model0, args, cfg))
            print(f"{way:>6}: {runs[way][-1]}", flush=True)
    return runs


def summarise(runs: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """Median time per way, the forward's tokens, the speed-ups, and the largest loss/gradient-norm gap to plain."""
    fig: dict[str, float] = {}
    for way, rs in runs.items():
        fig[f"{way}_update_s"] = median([r["update_s"] for r in rs])
        fig[f"{way}_forward_tokens"] = rs[0]["forward_tokens"]
    fig["speedup_turns_vs_plain"] = fig["plain_update_s"] / fig["turns_update_s"]
    fig["speedup_turns_vs_prompt"] = fig["prompt_update_s"] / fig["turns_update_s"]
    fig["speedup_prompt_vs_plain"] = fig["plain_update_s"] / fig["prompt_update_s"]
    fig["tokens_turns_vs_prompt"] = fig["turns_forward_tokens"] / fig["prompt_forward_tokens"]
    base = runs["plain"][0]
    fig["max_rel_grad_norm_gap"] = max(abs(r["grad_norm"] - base["grad_norm"]) / max(base["grad_norm"], 1e-12)
                                       for rs in runs.values() for r in rs)
    fig["max_loss_gap"] = max(abs(r["loss"] - base["loss"]) for rs in runs.values() for r in rs)
    return fig


def main() -> None:
    args = parse()
    args.rollouts = args.rollouts or sorted(DATA.glob("*.parquet"))
    torch.set_num_threads(args.threads)
    cfg = load_recipe(args.recipe, args.overrides)
    path = resolve_model(args.model or cfg.model.name)
    if args.autocast == "auto":
        args.autocast = choose_compute_dtype(path).dtype
    trajs = load_rollouts(args.rollouts)
    model0 = load_model(path)
    runs = run_ways(trajs, model0, args, cfg)
    fig = summarise(runs)
    fig["episodes"] = float(len(trajs))
    fig["sequence_tokens"] = float(sum(len(t.token_ids) for t in trajs))
    fig["peak_rss_gib"] = peak_rss_gib()
    print(describe_cpu())
    print_table(f"GRPO update on {len(trajs)} logged episodes ({', '.join(f.name for f in args.rollouts)}), "
                f"recipe {args.recipe}, estimator {cfg.algorithm.advantage}, {args.mini_batches} mini-batch(es), "
                f"compute_dtype={args.autocast}, micro-batch {args.micro_batch_tokens} tokens "
                f"(median of {args.repeats})", fig)
    save_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "figures": fig, "runs": runs})


if __name__ == "__main__":
    run_recorded("update_sharing", main)
