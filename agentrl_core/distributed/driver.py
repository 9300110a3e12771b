"""The Ray driver of the GRPO stage: rollout workers play, the trainer worker learns, weights sync each step."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl_core.config import RecipeConfig
from agentrl_core.distributed.cluster import import_ray, ray_runtime
from agentrl_core.secrets import worker_environment
from agentrl_core.distributed.placement import (
    check_fits,
    create_placement_groups,
    in_group,
    plan_placement,
)
from agentrl_core.distributed.async_loop import run_async
from agentrl_core.distributed.rollout_pool import RolloutPool, WorkersDied, retries_exhausted
from agentrl_core.distributed.trainer_worker import remote_trainer_worker
from agentrl_core.distributed.weight_sync import folder_files
from agentrl_core.env_service import EnvClient
from agentrl_core.config_checks import check_combinations
from agentrl_core.errors import AgentRLError
from agentrl_core.rollout import EpisodeSpec, Trajectory, write_trajectories
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.training.memory_plan import MemoryPlan, apply_plan, check_run_peak, memory_plan_for
from agentrl_core.rollout.grpo_rollout import rollout_metrics, round_specs, step_tasks, usable_trajectories
from agentrl_core.training.session import StageResult, StepCallback
from agentrl_core.training.timing import timed

log = logging.getLogger(__name__)


class TrainerDied(AgentRLError):
    """The trainer worker died; the run resumes from its last complete checkpoint when started again."""


def train_grpo_ray(cfg: RecipeConfig, *, init_model: Path, env_url: str, stage_dir: Path | None = None,
                   on_step: StepCallback | None = None) -> StageResult:
    """Run (or resume) the GRPO stage to `trainer.steps` on Ray; the same files and metrics as train_grpo."""
    check_combinations(cfg)  # a config built without validation (model_construct) is checked here too
    stage_dir = stage_dir or cfg.run_dir / "grpo"
    plan = plan_placement(cfg.distributed)
    memory = run_memory_plan(cfg, init_model, len(plan.rollout))
    cfg = apply_plan(cfg, memory) if memory is not None else cfg
    with ray_runtime(cfg.distributed, plan.cpus):
        ray = import_ray()
        check_fits(plan, ray.cluster_resources())
        rollout_group, trainer_group = create_placement_groups(plan)
        environment = ray.put(worker_environment(cfg))  # not a runtime env: that is job metadata anyone can list
        trainer, pool = None, None
        try:
            trainer = remote_trainer_worker({"num_cpus": plan.trainer.cpus, "num_gpus": plan.trainer.gpus,
                                             "scheduling_strategy": in_group(trainer_group, 0)}
                                            ).remote(cfg, str(init_model), str(stage_dir), environment=environment)
            model = ray.put(folder_files(init_model))  # rollout nodes need no path shared with this one
            pool = RolloutPool(plan, rollout_group, model, env_url, cfg, environment)
            return _loop(cfg, trainer, pool, env_url, stage_dir, on_step, memory)
        finally:
            _release(trainer, pool, rollout_group, trainer_group)


def run_memory_plan(cfg: RecipeConfig, init_model: Path, workers: int) -> MemoryPlan | None:
    """The memory plan of a Ray run this process starts itself (its trainer and `workers` rollout workers on this
    machine at once: training.memory_plan.plan_concurrent), logged; None on a cluster given by ray_address (its
    nodes' memory is not this machine's) and where no plan is made (GPU, DeepSpeed, no /proc)."""
    if cfg.distributed.ray_address is not None:
        return None
    memory = memory_plan_for(cfg, init_model, native_engine=True, rollout_workers=workers)
    if memory is not None:
        log.info("%s", memory.describe())
    return memory


def _loop(cfg: RecipeConfig, trainer: Any, pool: RolloutPool, env_url: str, stage_dir: Path,
          on_step: StepCallback | None, memory: MemoryPlan | None = None) -> StageResult:
    """Each step: sync the trainer's weights to the workers, roll out, update, log, checkpoint; with
    distributed.max_policy_lag set, the asynchronous schedule (distributed.async_loop) instead."""
    start = trainer_get(trainer.start_step.remote(), stage_dir)
    with EnvClient(env_url, timeout=cfg.env.request_timeout_s) as client:
        train_ids = resolve_task_ids(cfg.env, client, "train")
    hooks = _StepHooks(cfg, trainer, stage_dir, on_step, memory)
    last: dict[str, float] = {}
    if cfg.distributed.max_policy_lag is not None and start < cfg.trainer.steps:
        sync_from_trainer(trainer, pool, start, stage_dir)  # the first rollout's weights; later ones in flight
        last = run_async(cfg, trainer, pool, train_ids, start, stage_dir, hooks)
    else:
        for step in range(start, cfg.trainer.steps):
            sync_from_trainer(trainer, pool, step, stage_dir)
            last = ray_step(trainer, pool, train_ids, step, cfg, stage_dir)
            hooks.after_step(step + 1, last)
    if cfg.trainer.steps == 0 and start == 0:
        trainer_get(trainer.save.remote(0), stage_dir)
    checkpoint = trainer_get(trainer.last_checkpoint.remote(), stage_dir)
    return StageResult("grpo", checkpoint, cfg.trainer.steps, start, last)


class _StepHooks:
    """What ends a step in either schedule: the run's memory is checked against its plan, the trainer logs the
    step, saves when due, the caller hears of it."""

    def __init__(self, cfg: RecipeConfig, trainer: Any, stage_dir: Path, on_step: StepCallback | None,
                 memory: MemoryPlan | None = None) -> None:
        self.cfg, self.trainer, self.stage_dir, self.on_step, self.memory = cfg, trainer, stage_dir, on_step, memory

    def get(self, ref: Any) -> Any:
        return trainer_get(ref, self.stage_dir)

    def after_step(self, step: int, metrics: dict[str, float]) -> None:
        metrics.update(check_run_peak(self.memory, step, metrics))
        self.get(self.trainer.log.remote(step, metrics))
        if step % self.cfg.trainer.save_every == 0 or step == self.cfg.trainer.steps:
            self.get(self.trainer.save.remote(step, {"metrics": metrics}))
        if self.on_step is not None:
            self.on_step(step, self.cfg.trainer.steps, metrics)


def sync_from_trainer(trainer: Any, pool: RolloutPool, step: int, stage_dir: Path) -> None:
    """The trainer's weights to every rollout worker (one object-store copy, resolved by each worker). When the
    sync fails and the trainer does not answer either, the trainer's death is the error (TrainerDied, saying
    how to resume), not a worker's version."""
    ray = import_ray()
    try:
        pool.sync(step, trainer.state_dict.remote())
    except (AgentRLError, ray.exceptions.RayError):
        trainer_get(trainer.start_step.remote(), stage_dir)  # raises TrainerDied when the trainer is gone
        raise


def ray_step(trainer: Any, pool: RolloutPool, train_ids: Sequence[int], step: int, cfg: RecipeConfig,
             stage_dir: Path) -> dict[str, float]:
    """One step, with grpo_step's metrics plus `rollout_retries`: rollout on the pool → update on the trainer.
    Not here: the native engine's counters (rollout/prefilled_tokens, ...), which belong to the rollout
    workers' processes; `memory/peak_rss_gib` is the trainer's, `memory/rollout_peak_rss_gib` the largest
    rollout worker's."""
    timings: dict[str, float] = {}
    with timed("rollout", timings):
        specs, seed = round_specs(step_tasks(train_ids, step, cfg), step, 0, cfg)
        trajs, retries = rollout_with_retries(pool, specs, seed, step, cfg.distributed.max_step_retries)
        usable = usable_trajectories(trajs)
    write_trajectories(stage_dir / "rollout_log" / f"step_{step + 1:06d}.parquet", trajs, step=step + 1)
    metrics = rollout_metrics(trajs)
    metrics.update(rollout_rounds=1.0, samples_trained=0.0, rollout_retries=float(retries),
                   **{"memory/rollout_peak_rss_gib": pool.peak_rss_gib()})
    with timed("train", timings):
        metrics.update(trainer_get(trainer.update.remote(usable), stage_dir))
    metrics.update(timings)
    metrics["rollout_tokens_per_s"] = sum(t.response_tokens for t in trajs) / max(1e-9, timings["time/rollout_s"])
    metrics["train_tokens_per_s"] = sum(len(t.token_ids) for t in usable) / max(1e-9, timings["time/train_s"])
    metrics["time/step_s"] = timings["time/rollout_s"] + timings["time/train_s"]
    return metrics


def trainer_get(ref: Any, stage_dir: Path) -> Any:
    """The trainer call's result; its death becomes TrainerDied, saying how to resume."""
    ray = import_ray()
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as err:
        raise TrainerDied(f"the trainer worker died ({type(err).__name__}: {err}); start the stage again to resume "
                          f"from the last complete checkpoint under {stage_dir / 'checkpoints'}") from err


def rollout_with_retries(pool: RolloutPool, specs: Sequence[EpisodeSpec], seed: int, step: int,
                         max_retries: int) -> tuple[list[Trajectory], int]:
    """(trajectories, retries used): a worker death is logged, the worker recreated, the whole round replayed."""
    for attempt in range(max_retries + 1):
        try:
            return pool.run(specs, seed), attempt
        except WorkersDied as died:
            log.error("step %d: %s (attempt %d of %d)", step + 1, died, attempt + 1, max_retries + 1)
            pool.replace(died.indices, f"in the rollout of step {step + 1}")
    raise retries_exhausted(step + 1, max_retries + 1)


def _release(trainer: Any, pool: RolloutPool | None, *groups: Any) -> None:
    """Close the trainer's metrics file, kill the actors, free the placement groups."""
    ray = import_ray()
    from ray.util.placement_group import remove_placement_group

    if trainer is not None:
        try:
            ray.get(trainer.close.remote(), timeout=60)
        except ray.exceptions.RayError:
            log.exception("the trainer worker could not close its metrics file")
        ray.kill(trainer)
    if pool is not None:
        pool.shutdown()
    for group in groups:
        remove_placement_group(group)
