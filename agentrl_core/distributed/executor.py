"""The Ray executor of the GRPO loop: a rollout worker group plays, a trainer worker learns, weights travel between.

The loop (agentrl_core/grpo/loop.py) is the same as in-process; here its phases run on actors placed by
distributed.* (placement groups: the trainer's bundle and one per rollout worker). Every rollout worker holds
its own copy of the weights, so rollouts may overlap updates (`overlaps`): distributed.max_policy_lag >= 1.
A rollout worker that dies is recreated with the current weights and the round played again (up to
distributed.max_step_retries times: `rollout/retries`); a dead trainer ends the stage with TrainerDied, which
names the checkpoint a rerun resumes from.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any, ContextManager

from agentrl_core.config import RecipeConfig
from agentrl_core.config_checks import check_combinations
from agentrl_core.distributed.cluster import import_ray, ray_runtime
from agentrl_core.distributed.placement import check_fits, create_placement_groups, in_group, plan_placement
from agentrl_core.distributed.rollout_pool import RolloutPool, WorkersDied, retries_exhausted
from agentrl_core.distributed.trainer_worker import remote_trainer_worker
from agentrl_core.distributed.weight_sync import folder_files
from agentrl_core.errors import AgentRLError, ConfigError
from agentrl_core.rollout import EpisodeSpec, Trajectory
from agentrl_core.secrets import worker_environment
from agentrl_core.training.memory_plan import MemoryPlan, apply_plan, check_run_peak, memory_plan_for
from agentrl_core.evaluation.validation import validation_metrics, validation_specs

log = logging.getLogger(__name__)


class TrainerDied(AgentRLError):
    """The trainer worker died; the run resumes from its last complete checkpoint when started again."""


class RayExecutor:
    """Rollout workers and a trainer worker on Ray (a local Ray this process starts, or distributed.ray_address)."""

    overlaps = True

    def __init__(self, cfg: RecipeConfig, init_model: Path, stage_dir: Path, env_url: str) -> None:
        check_combinations(cfg)  # a config built without validation (model_construct) is checked here too
        self.stage_dir, self.retries = stage_dir, 0
        plan = plan_placement(cfg.distributed)
        self.memory = run_memory_plan(cfg, init_model, len(plan.rollout))
        self.cfg = cfg = apply_plan(cfg, self.memory) if self.memory is not None else cfg
        self._stack = ExitStack()
        self.trainer, self.pool, self._groups = None, None, ()
        try:
            self._start(plan, init_model, env_url)
        except BaseException:
            self.close()
            raise

    def _start(self, plan: Any, init_model: Path, env_url: str) -> None:
        self._stack.enter_context(ray_runtime(self.cfg.distributed, plan.cpus))
        ray = import_ray()
        check_fits(plan, ray.cluster_resources())
        rollout_group, trainer_group = self._groups = create_placement_groups(plan)
        environment = ray.put(worker_environment(self.cfg))  # not a runtime env: job metadata anyone can list
        self.trainer = remote_trainer_worker({"num_cpus": plan.trainer.cpus, "num_gpus": plan.trainer.gpus,
                                              "scheduling_strategy": in_group(trainer_group, 0)}
                                             ).remote(self.cfg, str(init_model), str(self.stage_dir),
                                                      environment=environment)
        model = ray.put(folder_files(init_model))  # rollout nodes need no path shared with this one
        self.pool = RolloutPool(plan, rollout_group, model, env_url, self.cfg, environment)
        self.start_step = self._get(self.trainer.start_step.remote())
        self.publish(self.start_step, in_flight=False)  # the first rollout's weights: the trainer's

    # ---- rollout side ---------------------------------------------------------------------------------

    def play(self, specs: Sequence[EpisodeSpec], seed: int, step: int) -> list[Trajectory]:
        """The round on the pool; a worker death is logged, the worker recreated, the whole round replayed."""
        limit = self.cfg.distributed.max_step_retries
        for attempt in range(limit + 1):
            try:
                return self.pool.run(specs, seed)
            except WorkersDied as died:
                log.error("step %d: %s (attempt %d of %d)", step + 1, died, attempt + 1, limit + 1)
                self.retries += 1
                self.pool.replace(died.indices, f"in the rollout of step {step + 1}")
        raise retries_exhausted(step + 1, limit + 1)

    def after_rollout(self, trajs: list[Trajectory], step: int) -> dict[str, float]:
        raise ConfigError("the experience pool does not run on the Ray executor yet (config_checks refuses "
                          "experience.enabled with distributed.backend=ray)")

    def engine_counters(self) -> dict[str, float]:
        return self.pool.engine_counters() | {"retries": float(self.retries)}

    def rollout_peak_gib(self) -> float:
        return self.pool.peak_rss_gib()

    def publish(self, version: int, in_flight: bool) -> None:
        """The trainer's weights to every worker: one object-store copy, resolved by each; in flight, a rollout
        under way takes it at its next decode step. A failed sync with a silent trainer is TrainerDied."""
        ray = import_ray()
        try:
            if in_flight:
                self.pool.offer(version, self.trainer.state_dict.remote())
            else:
                self.pool.sync(version, self.trainer.state_dict.remote())
        except (AgentRLError, ray.exceptions.RayError):
            self._get(self.trainer.start_step.remote())  # raises TrainerDied when the trainer is gone
            raise

    def validate(self, ids: Sequence[int]) -> dict[str, float]:
        eval_cfg = self.cfg.eval
        trajs = self.pool.run(validation_specs(ids), eval_cfg.seed, sampling=eval_cfg.sampling,
                              max_live=eval_cfg.batch_size)
        return validation_metrics(trajs)

    # ---- trainer side ---------------------------------------------------------------------------------

    def update(self, usable: list[Trajectory]) -> dict[str, float]:
        return self._get(self.trainer.update.remote(usable))

    def peaks(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        return check_run_peak(self.memory, step, metrics)  # memory/peak_rss_gib came with the update's metrics

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        self._get(self.trainer.keep_best.remote(step, metrics))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._get(self.trainer.log.remote(step, metrics))

    def save(self, step: int, extra: dict[str, Any]) -> str:
        return self._get(self.trainer.save.remote(step, extra))

    def last_checkpoint(self) -> str:
        return self._get(self.trainer.last_checkpoint.remote())

    def resume_hint(self) -> ContextManager[None]:
        return nullcontext()  # a full disk on the trainer's node comes back as the trainer's own error

    def _get(self, ref: Any) -> Any:
        """The trainer call's result; its death becomes TrainerDied, saying how to resume."""
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            raise TrainerDied(f"the trainer worker died ({type(err).__name__}: {err}); start the stage again to "
                              f"resume from the last complete checkpoint under {self.stage_dir / 'checkpoints'}"
                              ) from err

    def close(self) -> None:
        """Close the trainer's metrics file, kill the actors, free the placement groups, stop a Ray we started."""
        try:
            _release(self.trainer, self.pool, *self._groups)
        finally:
            self._stack.close()


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


def _release(trainer: Any, pool: RolloutPool | None, *groups: Any) -> None:
    """Close the trainer's metrics file, kill the actors, free the placement groups."""
    if trainer is None and pool is None and not groups:
        return
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
