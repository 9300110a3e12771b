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
from agentrl_core.distributed.trainer_worker import remote_trainer_worker, rendezvous
from agentrl_core.distributed.weight_sync import folder_files
from agentrl_core.errors import AgentRLError
from agentrl_core.experience.rollout_hooks import experience_after_rollout
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Trajectory
from agentrl_core.secrets import worker_environment
from agentrl_core.training.memory_plan import MemoryPlan, apply_plan, check_run_peak, memory_plan_for
from agentrl_core.evaluation.validation import validation_metrics, validation_specs

log = logging.getLogger(__name__)


class TrainerDied(AgentRLError):
    """The trainer worker died; the run resumes from its last complete checkpoint when started again."""


class TrainerStartError(AgentRLError):
    """A trainer worker failed in its constructor (a checkpoint it cannot resume, a bad model path): its own error
    message says what to change; not retried."""


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
        self.trainers: list[Any] = []
        self.pool, self._groups = None, ()
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
        self.trainers = start_trainers(plan, trainer_group, self.cfg, init_model, self.stage_dir, environment)
        model = ray.put(folder_files(init_model))  # rollout nodes need no path shared with this one
        self.chat = ChatFormat(load_tokenizer(init_model))
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
        """The experience hooks, from this process (the pool is reached from here, with the run's token); the
        model summariser writes its lessons with the rollout workers' current policy (`RolloutPool.generate`)."""
        return experience_after_rollout(trajs, self.pool, self.chat, step, self.cfg)

    def engine_counters(self) -> dict[str, float]:
        return self.pool.engine_counters() | {"retries": float(self.retries)}

    def rollout_peak_gib(self) -> float:
        return self.pool.peak_rss_gib()

    @property
    def trainer(self) -> Any:
        """Rank 0 of the trainer workers: it logs, writes the checkpoints and sends the weights."""
        return self.trainers[0]

    def publish(self, version: int, in_flight: bool) -> None:
        """The trainer's weights to every worker: one object-store copy (rank 0's; every rank takes part in
        ZeRO-3's gathers), resolved by each; in flight, a rollout under way takes it at its next decode step. A
        failed sync with a silent trainer is TrainerDied."""
        ray = import_ray()
        refs = [t.state_dict.remote() for t in self.trainers]
        try:
            if in_flight:
                self.pool.offer(version, refs[0])
            else:
                self.pool.sync(version, refs[0])
        except (AgentRLError, ray.exceptions.RayError):
            self._get(self.trainer.start_step.remote())  # raises TrainerDied when the trainer is gone
            raise
        self._all(refs[1:])

    def validate(self, ids: Sequence[int]) -> dict[str, float]:
        eval_cfg = self.cfg.eval
        trajs = self.pool.run(validation_specs(ids), eval_cfg.seed, sampling=eval_cfg.sampling,
                              max_live=eval_cfg.batch_size)
        return validation_metrics(trajs)

    # ---- trainer side ---------------------------------------------------------------------------------

    def update(self, usable: list[Trajectory]) -> dict[str, float]:
        """Every rank trains its share (training.data_parallel); rank 0's metrics are the batch's (summed over the
        ranks), memory/peak_rss_gib the largest rank's, memory/trainer_peak_rss_gib/rank_k each rank's."""
        metrics = self._all([t.update.remote(usable) for t in self.trainers])
        if len(metrics) == 1:
            return metrics[0]
        peaks = [m.get("memory/peak_rss_gib", 0.0) for m in metrics]
        return metrics[0] | {"memory/peak_rss_gib": max(peaks)} | {
            f"memory/trainer_peak_rss_gib/rank_{r}": p for r, p in enumerate(peaks)}

    def peaks(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        return check_run_peak(self.memory, step, metrics)  # memory/peak_rss_gib came with the update's metrics

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        self._all([t.keep_best.remote(step, metrics) for t in self.trainers])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._get(self.trainer.log.remote(step, metrics))

    def save(self, step: int, extra: dict[str, Any]) -> str:
        return self._all([t.save.remote(step, extra) for t in self.trainers])[0]

    def last_checkpoint(self) -> str:
        return self._get(self.trainer.last_checkpoint.remote())

    def resume_hint(self) -> ContextManager[None]:
        return nullcontext()  # a full disk on the trainer's node comes back as the trainer's own error

    def _all(self, refs: list[Any]) -> list[Any]:
        """The results of one call on several ranks, rank 0's first (its error is the one that explains: the
        others may wait in a collective for it)."""
        return [self._get(ref) for ref in refs]

    def _get(self, ref: Any) -> Any:
        """The trainer call's result; its death becomes TrainerDied, saying how to resume."""
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            if err.actor_init_failed:
                raise TrainerStartError(f"a trainer worker failed to start: {err.error_msg}") from err
            raise TrainerDied(f"the trainer worker died ({type(err).__name__}: {err}); start the stage again to "
                              f"resume from the last complete checkpoint under {self.stage_dir / 'checkpoints'}"
                              ) from err

    def close(self) -> None:
        """Close the trainer's metrics file, kill the actors, free the placement groups, stop a Ray we started."""
        try:
            _release(self.trainers, self.pool, *self._groups)
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


def start_trainers(plan: Any, group: Any, cfg: RecipeConfig, init_model: Path, stage_dir: Path,
                   environment: Any) -> list[Any]:
    """The trainer worker actors, one per trainer bundle; with several, ranks 0..N-1 meeting on rank 0's node."""
    ray, n = import_ray(), plan.trainer_workers
    master = None
    if n > 1:
        where = ray.remote(rendezvous).options(num_cpus=0, scheduling_strategy=in_group(group, 0))
        master = ray.get(where.remote())
    return [remote_trainer_worker({"num_cpus": plan.trainer.cpus, "num_gpus": plan.trainer.gpus,
                                   "scheduling_strategy": in_group(group, rank)}
                                  ).remote(cfg, str(init_model), str(stage_dir), environment=environment, rank=rank,
                                           world=n, master=master)
            for rank in range(n)]


def _release(trainers: list[Any], pool: RolloutPool | None, *groups: Any) -> None:
    """Close the trainer's metrics file, kill the actors, free the placement groups."""
    if not trainers and pool is None and not groups:
        return
    ray = import_ray()
    from ray.util.placement_group import remove_placement_group

    for trainer in trainers:
        try:
            ray.get(trainer.close.remote(), timeout=60)
        except ray.exceptions.RayError:
            log.exception("a trainer worker could not close its metrics file")
        ray.kill(trainer)
    if pool is not None:
        pool.shutdown()
    for group in groups:
        remove_placement_group(group)
