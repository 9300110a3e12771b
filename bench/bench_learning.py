"""Does GRPO help? base -> SFT -> SFT+GRPO on held-out tasks, with several GRPO seeds.

One SFT warm-start (deterministic), then GRPO from it once per seed; every model is evaluated
greedily on the same held-out tasks. Prints success rates, GRPO's mean gain over SFT, the
seed-to-seed spread (max - min over GRPO seeds), and whether the gain exceeds the spread.
Budget here (2 CPU cores): about 25 minutes with the defaults.

    .venv/bin/python bench/bench_learning.py [--seeds 0 1] [--recipe household_grpo] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from agentrl_core.checkpoints import export_hf  # noqa: E402
from agentrl_core.envs import launch_server  # noqa: E402
from agentrl_core.evaluation.runner import evaluate_model  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.training.grpo import train_grpo  # noqa: E402
from agentrl_core.training.sft import train_sft  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="household_grpo")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--root", default="runs/bench-learning")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


def success(cfg, model: Path, url: str) -> float:
    s = evaluate_model(model, env_name=cfg.env.name, env_url=url, cfg=cfg.eval, n_tasks=cfg.env.test_tasks,
                       max_turns=cfg.env.max_turns, max_context_tokens=cfg.rollout.max_context_tokens,
                       autocast=cfg.model.compute_dtype)
    return s.success_rate


def main() -> None:
    args = parse()
    start = time.time()
    cfg = load_recipe(args.recipe, [*args.overrides, f"run.root={args.root}", "run.name=sft"])
    base = resolve_model(cfg.model.name)
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        sft_ckpt = train_sft(cfg, init_model=base, env_url=server.url).checkpoint
        sft = export_hf(Path(sft_ckpt), cfg.run_dir / "export")
        rates = {"base": success(cfg, base, server.url), "sft": success(cfg, sft, server.url)}
        grpo = []
        for seed in args.seeds:
            scfg = load_recipe(args.recipe, [*args.overrides, f"run.root={args.root}", f"run.name=grpo-seed{seed}",
                                             f"trainer.seed={seed}"])
            ckpt = train_grpo(scfg, init_model=sft, env_url=server.url).checkpoint
            grpo.append(success(scfg, export_hf(Path(ckpt), scfg.run_dir / "export"), server.url))
            rates[f"grpo_seed{seed}"] = grpo[-1]
    gain = statistics.mean(grpo) - rates["sft"]
    spread = max(grpo) - min(grpo)
    n = cfg.env.test_tasks
    figures = {**rates, "grpo_mean": statistics.mean(grpo), "grpo_gain_over_sft": gain, "grpo_seed_spread": spread,
               "binomial_se_sft": math.sqrt(rates["sft"] * (1 - rates["sft"]) / n), "minutes": (time.time() - start) / 60}
    print_table(f"held-out success, {cfg.env.name}, {cfg.env.test_tasks} tasks, greedy", figures)
    verdict = "LARGER" if gain > spread else "NOT larger"
    print(f"GRPO gain over SFT ({gain:+.3f}) is {verdict} than the seed-to-seed spread ({spread:.3f}); "
          f"the binomial standard error of one {n}-task success rate is {figures['binomial_se_sft']:.3f}.")
    save_json(args.json, {"args": vars(args), "figures": figures})


if __name__ == "__main__":
    main()
