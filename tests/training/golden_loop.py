"""The in-process GRPO loop's golden run: what a fixed seed gives, recorded before the loop was refactored.

One run of the real loop (`train_grpo`, in-process) on the real env server: household (multi-turn, GiGPO: the
turns and the step groups reach the update), the tiny 2-layer model (random weights, the real tokenizer), 3
steps of 2 tasks x 4 samples, fp32, two mini-batches per step (the PPO ratio and clip active), the KL to the
reference in the reward (a random model never wins: from step 2 on, the samples' KL gives every group a
fractional spread of returns, so the advantages are not 0) and an entropy bonus (step 1 moves the weights);
then its per-step metrics and a fingerprint of the final weights.
`tests/training/test_golden_loop.py` replays it and compares with `GOLDEN`; refresh it only for a change that
is meant to change the numbers, with

    .venv/bin/python -m tests.training.golden_loop --write
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

GOLDEN = Path(__file__).parent / "golden" / "grpo_inprocess_seed0.json"
OVERRIDES = ["trainer.steps=3", "trainer.save_every=3", "trainer.seed=0", "rollout.tasks_per_step=2",
             "rollout.group_size=4", "rollout.sampling.max_new_tokens=6", "env.max_turns=3",
             "algorithm.kl_reward_coef=0.5", "model.compute_dtype=float32", "trainer.optim.lr=1e-3",
             "trainer.ppo_mini_batches=2", "algorithm.entropy_coef=0.01", "trainer.memory_gb=null"]
EXACT = ("reward_mean", "success_rate", "response_length", "episode_tokens", "turns_mean", "samples_trained",
         "samples_backpropagated", "groups_with_signal", "invalid_action_rate", "mini_batches")
"""Metrics that count or average discrete outcomes: equal to the golden run exactly."""
CLOSE = ("loss", "pg_loss", "grad_norm", "entropy", "clipfrac", "adv_abs_mean", "shaped_reward_mean")
"""Float metrics of the update: equal within a relative REL (another CPU rounds its kernels differently)."""
REL = 3e-3
"""Relative tolerance of CLOSE metrics and of the weights' fingerprint. Another CPU rounds its float32 kernels
differently, and this run amplifies that by design: its advantages normalise a spread of returns of ~1e-3 (the
KL in the reward) by its std, and pg_loss is a cancelled sum of terms ~1000x its size. Measured on an AVX2 CPU
(AMD EPYC family 25 model 1) against the recording's AVX-512 one: at most 6.2e-4 on the metrics (pg_loss at
step 2; advantages 3.4e-4 at step 3) and 7.9e-4 on the weights. A change of formula moves these by percents."""
NOISE = {"rollout_logp_diff": 1e-5}
"""Metrics that are float32 rounding themselves, with their bound: the engine's and the trainer's log-probs of the
same tokens differ only by how each kernel rounds (~4e-7 here), so the value is compared with a bound, not with
the golden run's (an AVX2 CPU gave 4.8e-7 where the recording's AVX-512 one gave 3.6e-7)."""


def run(model: Path, env_url: str, root: Path) -> dict[str, Any]:
    """Play the golden run under `root`; its metrics per step and the final weights' fingerprint."""
    from safetensors.torch import load_file

    from agentrl_core.recipes import load_recipe
    from agentrl_core.grpo import train_grpo

    cfg = load_recipe("household_gigpo", [f"model.name={model}", f"run.root={root}", *OVERRIDES])
    result = train_grpo(cfg, init_model=model, env_url=env_url, stage_dir=root / "grpo")
    lines = [json.loads(x) for x in (root / "grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [{k: m[k] for k in (*EXACT, *CLOSE, *NOISE) if k in m} for m in lines]
    weights = load_file(str(Path(result.checkpoint) / "model" / "model.safetensors"))
    return {"steps": steps, "weights": fingerprint(weights)}


def fingerprint(weights: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Per tensor: [sum, sum of squares, first value, last value] in float64."""
    out = {}
    for name in sorted(weights):
        w = weights[name].double().flatten()
        out[name] = [float(w.sum()), float((w * w).sum()), float(w[0]), float(w[-1])]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"record the golden run to {GOLDEN}")
    args = p.parse_args()
    from agentrl_core.env_service import launch_server
    from tests.conftest import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp, launch_server(["household"]) as server:
        model = make_tiny_model(Path(tmp) / "tiny")
        out = run(model, server.url, Path(tmp) / "run")
    text = json.dumps(out, indent=1) + "\n"
    if args.write:
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN}")
    else:
        print(text)


if __name__ == "__main__":
    main()
