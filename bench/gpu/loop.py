"""The product's own GRPO loop on the household env: its recipe, its env server, steps per hour.

Everything here is agentrl's: `recipes/household_learn.yaml` (one kitchen, up to 4 receptacles and 3
objects, 8 turns, 8 tasks x 8 samples per step, GiGPO), the env server as a subprocess
(`launch_server`), and `train_grpo` in this process (`distributed.backend: local`) with the policy, its
native engine and the update on `device`.

    steps/hour = 3600 · (n − 1) / (time of step n's end − time of step 1's end)   (step 1 warms up)

The asynchronous loop is not measured: in-process (backend local) the loop is synchronous; asynchronous
training (`distributed.max_policy_lag`) runs only on the Ray executor, and Ray is not on the GPU machine.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench.gpu.record import Figures

RECIPE = "household_learn"
COMMON = ["trainer.save_every=100000", "trainer.keep_last=1", "trainer.val_every=0", "sft.save_every=100000"]
"""A checkpoint only at the end of a stage (or when max_minutes stops it): saving 1.6 GB of weights and AdamW
state every few steps would cost more than the steps."""
GPU_OVERRIDES = ["trainer.micro_batch_tokens=16384", "rollout.engine.max_step_tokens=8192"]
"""Bigger micro-batches on a GPU (the memory plan that sizes them from RAM is off on CUDA), and a whole turn's new
observations prefilled in one forward (64 episodes x ~50 tokens): the engine is launch-bound there, so fewer,
larger forwards are faster. The algorithm and the samples' distribution are the recipe's."""
DRY_OVERRIDES = ["rollout.group_size=2", "rollout.tasks_per_step=2", "env.test_tasks=4", "env.max_turns=4",
                 "rollout.sampling.max_new_tokens=4", "eval.sampling.max_new_tokens=4", "eval.batch_size=4",
                 "sft.demos=4", "sft.epochs=1", "sft.batch_size=2", "model.compute_dtype=float32",
                 "trainer.micro_batch_tokens=1024", "model.cpu_threads=1"]
"""The dry run's tiny version of the same recipe: 2 tasks x 2 samples, 4 turns of 4 tokens, 4 demos, 4 test scenes;
one CPU thread (two threads on two busy cores wait on each other: 40x slower here)."""
ASYNC_NOTE = ("sync vs async steps/hour: only sync is measured. The product's in-process loop "
              "(distributed.backend=local) has no asynchronous mode; asynchronous training "
              "(distributed.max_policy_lag) exists only on the Ray executor, and Ray is not on the GPU machine.")


def recipe(root: Path, name: str, dry_run: bool, *extra: str) -> Any:
    """household_learn with this run's folder, checkpointing at the end, and the dry run's or the GPU's sizes."""
    from agentrl_core.recipes import load_recipe

    sizes = DRY_OVERRIDES if dry_run else GPU_OVERRIDES
    return load_recipe(RECIPE, [f"run.root={root}", f"run.name={name}", *COMMON, *sizes, *extra])


def env_server(cfg: Any) -> Any:
    """agentrl's env server for the recipe's env (a subprocess on 127.0.0.1; stop it with .stop())."""
    from agentrl_core.env_service import launch_server

    return launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}, startup_timeout=60.0)


class StepClock:
    """on_step callback: the wall time at which each step ended, and its metrics."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.metrics: list[dict[str, float]] = []

    def __call__(self, step: int, total: int, metrics: dict[str, float]) -> None:
        self.ends.append(time.monotonic())
        self.metrics.append(dict(metrics))

    def steps_per_hour(self) -> float:
        """3600·(n − 1)/(last end − first end); nan with fewer than 2 steps."""
        if len(self.ends) < 2:
            return float("nan")
        return 3600.0 * (len(self.ends) - 1) / max(1e-9, self.ends[-1] - self.ends[0])

    def median(self, key: str) -> float:
        values = [m[key] for m in self.metrics[1:] or self.metrics if key in m]
        return statistics.median(values) if values else float("nan")


def train(cfg: Any, init_model: Path, url: str, device: torch.device) -> tuple[str, StepClock]:
    """train_grpo in this process on `device`; (its last checkpoint, the step clock)."""
    from agentrl_core.grpo import train_grpo

    clock = StepClock()
    result = train_grpo(cfg, init_model=init_model, env_url=url, on_step=clock, device=device.type)
    return result.checkpoint, clock


def sync_steps_per_hour(figs: Figures, work: Path, model_dir: Path, device: torch.device, dry_run: bool,
                        steps: int) -> None:
    """Steps per hour of the synchronous loop, with a random-weight model (its replies never end early, so
    every episode runs its 8 turns of 12 tokens: the longest steps the recipe allows)."""
    cfg = recipe(work, "loop-sync", dry_run, f"trainer.steps={steps}")
    with env_server(cfg) as server:
        _, clock = train(cfg, model_dir, server.url, device)
    figs.add("loop/sync_steps_per_hour", round(clock.steps_per_hour(), 1), unit="steps/h",
             note=f"{RECIPE}: {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} samples, "
                  f"{len(clock.ends)} steps, random weights (every episode runs to its turn limit)")
    figs.add("loop/rollout_s", round(clock.median("time/rollout_s"), 3), unit="s")
    figs.add("loop/train_s", round(clock.median("time/train_s"), 3), unit="s")
    figs.add("loop/rollout_tokens_per_s", round(clock.median("rollout_tokens_per_s"), 1), unit="tok/s")
    figs.note(ASYNC_NOTE)
