"""The algorithm family at equal wall time: GRPO, Dr.GRPO, RLOO, DAPO, OPMD (and R3L) from one SFT start.

The laptop-sized version of the Trinity-RFT R3L grid (five algorithms). One SFT warm-start (or --sft, an exported model),
then each algorithm trains from it for the same wall-time budget (trainer.max_minutes; steps is
only a cap), and every result plays the same held-out tasks greedily. Prints a table of held-out
success with 95% Wilson intervals, each algorithm against SFT and against GRPO as paired
differences with 95% intervals, and steps done; draws one plot (training reward over wall time
per algorithm, held-out success with error bars). Run by hand, not in CI: about
(minutes + 3) x algorithms minutes.

    .venv/bin/python bench/bench_grid.py [--recipe math_learn] [--minutes 4] [--algorithms grpo rloo ...]
        [--sft runs/bench-learning/sft/export] [KEY=VALUE ...]
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
from bench.bench_learning import evaluate  # noqa: E402
from agentrl_core.checkpoints import export_hf  # noqa: E402
from agentrl_core.env_service import launch_server  # noqa: E402
from agentrl_core.evaluation.stats import compare  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import resolve_compute_settings  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402
from agentrl_core.training.sft import train_sft  # noqa: E402

ALGORITHMS = {
    "grpo": [],  # the recipe's own algorithm section (math_learn: GRPO, PPO-clip, seq-mean-token-mean)
    "drgrpo": ["algorithm.advantage=drgrpo", "algorithm.policy_loss=ppo_clip",
               "algorithm.loss_agg_mode=seq-mean-token-sum-norm", "algorithm.loss_scale_tokens=64"],
    "rloo": ["algorithm.advantage=rloo", "algorithm.policy_loss=ppo_clip", "algorithm.loss_agg_mode=token-mean"],
    "dapo": ["algorithm.advantage=grpo", "algorithm.policy_loss=ppo_clip", "algorithm.loss_agg_mode=token-mean",
             "algorithm.clip_ratio_high=0.28", "algorithm.dynamic_sampling=true",
             "algorithm.dynamic_sampling_max_rounds=3"],
    "opmd": ["algorithm.advantage=opmd", "algorithm.policy_loss=opmd", "algorithm.loss_agg_mode=token-mean"],
    "r3l": ["algorithm.advantage=r3l", "algorithm.policy_loss=opmd", "algorithm.loss_agg_mode=token-mean",
            "algorithm.r3l_retry=true"],
}
"""Each algorithm as recipe overrides of the algorithm section only (as in the Trinity-RFT R3L grid). R3L reflects and
retries within an episode, so it applies to multi-turn recipes only (not to math_learn's one attempt)."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="math_learn")
    p.add_argument("--algorithms", nargs="+", default=["grpo", "drgrpo", "rloo", "dapo", "opmd"],
                   choices=list(ALGORITHMS))
    p.add_argument("--minutes", type=float, default=4.0, help="GRPO wall time per algorithm")
    p.add_argument("--eval-tasks", type=int, default=200)
    p.add_argument("--sft", help="an exported SFT model to start from (default: train one)")
    p.add_argument("--root", default="runs/bench-grid")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


def curve(stage_dir: Path) -> list[tuple[float, float]]:
    """(minutes since the first step began, rollout reward) per GRPO step."""
    rows = [m for m in read_metrics(stage_dir / "metrics.jsonl") if "reward_mean" in m]
    elapsed, out = 0.0, []
    for m in rows:
        elapsed += m.get("time/step_s", 0.0)
        out.append((elapsed / 60, m["reward_mean"]))
    return out


def plot(curves: dict[str, list[tuple[float, float]]], evals: dict, out: Path) -> None:
    from agentrl_core.evaluation.plots import draw_interval_bars, plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, points in curves.items():
        left.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
    left.set(xlabel="minutes of GRPO", ylabel="rollout reward (train tasks)", title="training reward")
    left.legend()
    names = list(evals)
    draw_interval_bars(right, names, [evals[n].success_rate for n in names], [evals[n].success_low for n in names],
                       [evals[n].success_high for n in names])
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main() -> None:
    args = parse()
    start = time.time()
    common = [*args.overrides, f"env.test_tasks={args.eval_tasks}", f"run.root={args.root}"]
    cfg = load_recipe(args.recipe, [*common, "run.name=sft"])
    cfg = resolve_compute_settings(cfg, resolve_model(cfg.model.name))
    evals, curves, steps = {}, {}, {}
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        if args.sft:
            sft = Path(args.sft)
        else:
            ckpt = train_sft(cfg, init_model=resolve_model(cfg.model.name), env_url=server.url).checkpoint
            sft = export_hf(Path(ckpt), cfg.run_dir / "export")
        evals["sft"] = evaluate(cfg, sft, server.url, "sft")
        for name in args.algorithms:
            acfg = load_recipe(args.recipe, [*common, *ALGORITHMS[name], f"run.name={name}",
                                             f"trainer.max_minutes={args.minutes}", "trainer.steps=1000",
                                             f"model.compute_dtype={cfg.model.compute_dtype}"])
            result = train_grpo(acfg, init_model=sft, env_url=server.url)
            steps[name] = result.steps
            evals[name] = evaluate(acfg, export_hf(Path(result.checkpoint), acfg.run_dir / "export"), server.url, name)
            curves[name] = curve(acfg.run_dir / "grpo")
    print(describe_cpu())
    figures = {f"{n}_success": s.success_rate for n, s in evals.items()}
    figures |= {f"{n}_steps": float(k) for n, k in steps.items()}
    figures["minutes_total"] = (time.time() - start) / 60
    print_table(f"algorithms at {args.minutes:g} min of GRPO each, {cfg.env.name}, {args.eval_tasks} held-out tasks",
                figures)
    comparisons = [compare(evals[n].task_success, evals["sft"].task_success, (n, "sft")) for n in args.algorithms]
    if "grpo" in args.algorithms:
        comparisons += [compare(evals[n].task_success, evals["grpo"].task_success, (n, "grpo"))
                        for n in args.algorithms if n != "grpo"]
    for name, s in evals.items():
        print(f"  {name:>8}: {s.success_text()}  ({steps.get(name, 0)} steps)")
    for c in comparisons:
        print(f"  {c.text()}")
    out = Path(args.root)
    out.mkdir(parents=True, exist_ok=True)
    plot(curves, evals, out / "grid.png")
    save_json(args.json or str(out / "bench_grid.json"), {
        "args": vars(args), "cpu": describe_cpu(), "figures": figures, "steps": steps,
        "evals": {k: v.to_dict() for k, v in evals.items()}, "comparisons": [c.to_dict() for c in comparisons],
        "curves": curves})


if __name__ == "__main__":
    reexec_script_with_tuned_malloc()  # the allocator `agentrl run` uses (AGENTRL_SYSTEM_MALLOC=1: glibc's default)
    run_recorded("grid", main)
