"""Does RL make the agent better? base -> SFT -> SFT+GRPO on held-out tasks, several GRPO seeds, with intervals.

One SFT warm-start (deterministic), then GRPO from it once per seed. Every model plays the same
held-out tasks greedily (the recipe's env.test_tasks, 200 by default here). Prints each model's
success rate with its 95% Wilson interval, each GRPO seed against SFT as a paired difference
on the same tasks with its 95% interval (Newcombe; McNemar's exact p), a verdict in words, and
the training reward per step (first and last quarter of the run) so a rising curve shows.
Writes the figures (JSON) and a plot of the training curves beside them.

    .venv/bin/python bench/bench_learning.py [--recipe math_learn] [--seeds 0 1] [--eval-tasks 200]
        [--json out.json] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.allocator import reexec_script_with_tuned_malloc  # noqa: E402
from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.checkpoints import export_hf  # noqa: E402
from agentrl_core.env_service import launch_server  # noqa: E402
from agentrl_core.evaluation.runner import evaluate_model  # noqa: E402
from agentrl_core.evaluation.report import quarter_means  # noqa: E402
from agentrl_core.evaluation.stats import compare  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import resolve_compute_settings  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402
from agentrl_core.training.sft import train_sft  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="math_learn")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--eval-tasks", type=int, default=200, help="held-out tasks every model plays (the same ones)")
    p.add_argument("--skip-base", action="store_true", help="do not evaluate the base model")
    p.add_argument("--root", default="runs/bench-learning")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


def evaluate(cfg, model: Path, url: str, label: str):
    """The model's EvalSummary on the first eval-tasks test tasks, greedy (trajectories kept under the run)."""
    return evaluate_model(model, env_name=cfg.env.name, env_url=url, cfg=cfg.eval, n_tasks=cfg.env.test_tasks,
                          max_turns=cfg.env.max_turns, max_context_tokens=cfg.rollout.max_context_tokens,
                          autocast=cfg.model.compute_dtype, engine=cfg.rollout.engine,
                          out_dir=Path(cfg.run.root) / "eval" / label)


def reward_curve(stage_dir: Path) -> list[float]:
    """The rollout reward of each GRPO step (training tasks)."""
    return [m["reward_mean"] for m in read_metrics(stage_dir / "metrics.jsonl") if "reward_mean" in m]


def plot(curves: dict[str, list[float]], out: Path) -> None:
    from agentrl_core.evaluation.plots import plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker="o", label=name)
    ax.set(xlabel="GRPO step", ylabel="rollout reward (train tasks)", title="GRPO training reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main() -> None:
    args = parse()
    start = time.time()
    common = [*args.overrides, f"env.test_tasks={args.eval_tasks}", f"run.root={args.root}"]
    cfg = load_recipe(args.recipe, [*common, "run.name=sft"])
    base = resolve_model(cfg.model.name)
    cfg = resolve_compute_settings(cfg, base)  # auto -> this machine's compute dtype, as the flows do
    minutes: dict[str, float] = {}
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        t = time.time()
        sft = export_hf(Path(train_sft(cfg, init_model=base, env_url=server.url).checkpoint), cfg.run_dir / "export")
        minutes["sft"] = (time.time() - t) / 60
        evals = {} if args.skip_base else {"base": evaluate(cfg, base, server.url, "base")}
        evals["sft"] = evaluate(cfg, sft, server.url, "sft")
        curves = {}
        for seed in args.seeds:
            t = time.time()
            scfg = load_recipe(args.recipe, [*common, f"run.name=grpo-seed{seed}", f"trainer.seed={seed}",
                                             f"model.compute_dtype={cfg.model.compute_dtype}"])
            ckpt = train_grpo(scfg, init_model=sft, env_url=server.url).checkpoint
            minutes[f"grpo_seed{seed}"] = (time.time() - t) / 60
            evals[f"grpo_seed{seed}"] = evaluate(scfg, export_hf(Path(ckpt), scfg.run_dir / "export"), server.url,
                                                 f"grpo_seed{seed}")
            curves[f"seed {seed}"] = reward_curve(scfg.run_dir / "grpo")
    report(args, cfg, evals, curves, minutes, time.time() - start)


def report(args, cfg, evals, curves, minutes, wall_s: float) -> None:
    print(describe_cpu())
    figures = {f"{name}_success": s.success_rate for name, s in evals.items()}
    comparisons = [compare(evals[name].task_success, evals["sft"].task_success, (name, "sft"))
                   for name in evals if name.startswith("grpo")]
    for c in comparisons:
        figures[f"{c.a}_gain_over_sft"] = c.diff
    for name, curve in curves.items():
        first, last = quarter_means(curve)
        figures[f"reward_first_quarter ({name})"], figures[f"reward_last_quarter ({name})"] = first, last
    figures.update({f"minutes_{k}": v for k, v in minutes.items()})
    figures["minutes_total"] = wall_s / 60
    print_table(f"held-out success, {cfg.env.name}, {args.eval_tasks} tasks, greedy", figures)
    for name, s in evals.items():
        print(f"  {name:>12}: {s.success_text()}")
    for c in comparisons:
        print(f"  {c.text()}")
    shown = all(c.low > 0 for c in comparisons)
    print(f"GRPO > SFT on every seed, interval excluding 0: {'yes' if shown else 'no'}; "
          f"mean gain {100 * sum(c.diff for c in comparisons) / max(1, len(comparisons)):+.1f} points.")
    out = Path(args.root)
    plot(curves, out / "reward_curves.png")
    save_json(args.json or str(out / "bench_learning.json"), {
        "args": vars(args), "cpu": describe_cpu(), "figures": figures,
        "evals": {k: v.to_dict() for k, v in evals.items()}, "comparisons": [c.to_dict() for c in comparisons],
        "reward_curves": curves})


if __name__ == "__main__":
    reexec_script_with_tuned_malloc()  # the allocator `agentrl run` uses (AGENTRL_SYSTEM_MALLOC=1: glibc's default)
    run_recorded("learning", main)
