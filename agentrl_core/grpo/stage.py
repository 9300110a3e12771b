"""The GRPO stage: the one loop over the executor the recipe names (in-process, or Ray); resumable."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path

import torch

from agentrl_core.system.atomic_file import write_text_atomic
from agentrl_core.config import RecipeConfig
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.experience.launcher import experience_for
from agentrl_core.grpo.executor import Executor
from agentrl_core.grpo.local import LocalExecutor
from agentrl_core.grpo.loop import Stage, run_loop
from agentrl_core.system.machine_info import reset_peak_resident
from agentrl_core.models.compute_settings import resolve_compute_settings
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.training.memory_plan import apply_plan, memory_plan_for
from agentrl_core.training.session import StageResult, StepCallback
from agentrl_core.training.stage_lock import stage_writer
from agentrl_core.evaluation.validation import validation_ids

log = logging.getLogger(__name__)

ALGORITHM_FILE = "algorithm.json"
"""The stage's algorithm section as it trains (estimator, loss, KL, ...), written at every start: what a
run's numbers came from, readable without the command line that set it."""


def train_grpo(cfg: RecipeConfig, *, init_model: Path, env_url: str, stage_dir: Path | None = None,
               on_step: StepCallback | None = None, device: str = "cpu") -> StageResult:
    """Run (or resume) the GRPO stage to `trainer.steps`; returns its last checkpoint. `distributed.backend`
    picks the executor: local (this process, the model on `device`: "cpu" or "cuda") or ray (rollout workers
    and a trainer as Ray actors, placed by distributed.*). The same loop, files and metrics either way."""
    cfg = resolve_compute_settings(cfg, init_model)  # model.compute_dtype/cpu_threads auto -> this machine's
    stage_dir = stage_dir or cfg.run_dir / "grpo"
    with stage_writer(stage_dir), ExitStack() as stack:  # one writer per stage directory (StageBusyError)
        record_algorithm(stage_dir, cfg)
        cfg = stack.enter_context(experience_for(cfg, stage_dir.parent))  # the pool, when on and not running
        client = stack.enter_context(EnvClient(env_url, timeout=cfg.env.request_timeout_s))
        executor, cfg = open_executor(cfg, init_model, stage_dir, env_url, client, device)
        try:
            stage = Stage(cfg, executor, resolve_task_ids(cfg.env, client, "train"), stage_dir,
                          lambda: RemoteEnv(client, cfg.env.name),
                          validation_ids(cfg, client) if cfg.trainer.val_every > 0 else (), on_step)
            with executor.resume_hint():
                done, last = run_loop(stage)
            return StageResult("grpo", executor.last_checkpoint(), max(done, executor.start_step),
                               executor.start_step, last)
        finally:
            executor.close()


def open_executor(cfg: RecipeConfig, init_model: Path, stage_dir: Path, env_url: str, client: EnvClient,
                  device: str) -> tuple[Executor, RecipeConfig]:
    """The recipe's executor, with the recipe as its memory plan sized it."""
    torch.manual_seed(cfg.trainer.seed)
    if cfg.distributed.backend == "ray":
        from agentrl_core.distributed.executor import RayExecutor

        executor = RayExecutor(cfg, init_model, stage_dir, env_url)
        return executor, executor.cfg
    plan = memory_plan_for(cfg, init_model, native_engine=cfg.rollout.engine.kind in ("auto", "native"))
    if plan is not None:  # KV cache, micro-batches and checkpointing sized from the memory budget
        cfg = apply_plan(cfg, plan)
        log.info("%s", plan.describe())
    if not reset_peak_resident():  # the memory/peak_* metrics are this stage's, not an earlier stage's
        log.info("peak memory counts from the process's start: /proc/self/clear_refs cannot be written here")
    return LocalExecutor(cfg, init_model, stage_dir, env_url, client, plan, device), cfg


def record_algorithm(stage_dir: Path, cfg: RecipeConfig) -> Path:
    """Write the recipe's algorithm section to `stage_dir/algorithm.json` (atomically; no secrets live there)."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(stage_dir / ALGORITHM_FILE, cfg.algorithm.model_dump_json(indent=2) + "\n")
