"""The rollout pool: N rollout worker actors, episodes split across them, dead workers replaced."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl_core.config import RecipeConfig
from agentrl_core.distributed.placement import PlacementPlan, in_group
from agentrl_core.distributed.rollout_worker import remote_rollout_worker
from agentrl_core.distributed.weight_sync import check_versions, sync_weights
from agentrl_core.errors import AgentRLError
from agentrl_core.rollout import EpisodeSpec, Trajectory

log = logging.getLogger(__name__)
REPLACE_ATTEMPTS = 5
"""How often a dead rollout worker is recreated before the error is the step's (see RolloutPool.replace)."""
REPLACE_WAIT_S = 5.0
"""Seconds before the k-th new attempt: k times this (Ray takes some 10-30 s to declare a silent node dead)."""
SHARD_SEED_STRIDE = 10_007
"""Shard i samples with seed + i * stride, so workers draw different streams (shard 0 keeps the seed)."""


class WorkerStartError(AgentRLError):
    """A rollout worker failed in its constructor (bad model path, unreachable env server): not retried."""


class RolloutRetriesExhausted(AgentRLError):
    """A step's rollout failed more often than distributed.max_step_retries allows."""


def retries_exhausted(step: int, attempts: int) -> RolloutRetriesExhausted:
    """The error of step `step` (1-based) whose rollout died in all `attempts` tries (a plain message: it pickles)."""
    return RolloutRetriesExhausted(
        f"step {step}: rollout workers died in all {attempts} attempts; see the errors above (out of memory? a "
        "crashing env?), raise distributed.max_step_retries, or resume the run from its last checkpoint")


class WorkersDied(AgentRLError):
    """One or more rollout workers died during a call; `indices` names them."""

    def __init__(self, indices: list[int], detail: str) -> None:
        super().__init__(f"rollout workers {indices} died: {detail}")
        self.indices = indices


def died_errors() -> tuple[type[BaseException], ...]:
    """What a call to a dead worker raises: the actor's death, or Ray's memory monitor having killed it (the node
    ran low on memory), which Ray reports as its own error type."""
    import ray

    return ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError


def split_evenly(items: Sequence[Any], n: int) -> list[list[Any]]:
    """`items` in n contiguous shards whose sizes differ by at most one (larger first)."""
    q, r = divmod(len(items), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [list(items[bounds[i]:bounds[i + 1]]) for i in range(n)]


@dataclass
class _Weights:
    version: int
    ref: Any


class RolloutPool:
    """Creates one actor per rollout bundle of the placement plan, and keeps them alive and in sync."""

    def __init__(self, plan: PlacementPlan, group: Any, init_model: Any, env_url: str, cfg: RecipeConfig,
                 environment: Any = None) -> None:
        """`init_model`: the model folder's path, or an ObjectRef of its files (weight_sync.folder_files);
        `environment`: an ObjectRef of the run's secret variables, which every worker adopts."""
        self.plan, self.group, self.init_model, self.env_url, self.cfg = plan, group, init_model, env_url, cfg
        self.environment = environment
        self.weights: _Weights | None = None
        # The loop publishes from its thread while a rollout (which may replace a dead worker) runs in another:
        # what the workers hold changes under this lock only, so a replacement never gets older weights than
        # a publish gave the others, and a publish reaches a replacement that is already in the list.
        self._weights_lock = threading.RLock()
        self.workers = [self._spawn(i) for i in range(len(plan.rollout))]

    def name(self, index: int) -> str:
        return f"rollout-worker-{index}"

    def _spawn(self, index: int) -> Any:
        bundle = self.plan.rollout[index]
        cls = remote_rollout_worker({"num_cpus": bundle.cpus, "num_gpus": bundle.gpus, "max_restarts": 0,
                                     "scheduling_strategy": in_group(self.group, index)})
        return cls.remote(self.init_model, self.env_url, self.cfg, environment=self.environment)

    def sync(self, version: int, state_ref: Any) -> None:
        """Every worker to `version` (checked); a worker found dead is replaced, which loads it too."""
        import ray

        with self._weights_lock:
            self.weights = _Weights(version, state_ref)
            names = [self.name(i) for i in range(len(self.workers))]
            try:
                sync_weights(self.workers, names, version, state_ref)
            except died_errors() as err:
                self.replace(self._dead(), f"during the weight sync to version {version} ({type(err).__name__})")
                check_versions(ray.get([w.weights_version.remote() for w in self.workers]), version, names)

    def offer(self, version: int, state_ref: Any) -> None:
        """Every worker gets `version` in flight (taken at its next decode step, a rollout under way goes on):
        the asynchronous loop's sync. A dead worker is left to the rollout that finds it (WorkersDied)."""
        import ray

        with self._weights_lock:
            self.weights = _Weights(version, state_ref)
            for i, worker in enumerate(self.workers):
                try:
                    ray.get(worker.offer_weights.remote(version, state_ref))
                except died_errors() as err:
                    log.error("%s did not take weights version %d (%s); its rollout will find it dead", self.name(i),
                              version, type(err).__name__)

    def run(self, specs: Sequence[EpisodeSpec], seed: int, **options: Any) -> list[Trajectory]:
        """Every spec played (contiguous shards, one per worker; `options`: RolloutWorker.run's sampling and
        max_live); raises WorkersDied naming the dead ones."""
        return self.collect(self.launch(specs, seed, **options))

    def launch(self, specs: Sequence[EpisodeSpec], seed: int, **options: Any) -> list[tuple[int, Any]]:
        """Start playing every spec (contiguous shards, one per worker); (worker index, ObjectRef) per shard."""
        shards = split_evenly(specs, len(self.workers))
        return [(i, w.run.remote(s, seed + i * SHARD_SEED_STRIDE, **options))
                for i, (w, s) in enumerate(zip(self.workers, shards)) if s]

    def generate(self, prompts: Sequence[list[int]], sampling: Any, seed: int) -> list[Any]:
        """Replies of the current policy to raw prompts (the first worker's engine): an `Engine` for callers that
        only generate, e.g. the experience pool's model summariser."""
        import ray

        return ray.get(self.workers[0].generate.remote(list(prompts), sampling, seed))

    def engine_counters(self) -> dict[str, float]:
        """The workers' engine counts summed (a worker that does not answer, or was just replaced: left out)."""
        import ray

        total: dict[str, float] = {}
        for worker in self.workers:
            try:
                counts = ray.get(worker.engine_counters.remote(), timeout=60)
            except (*died_errors(), ray.exceptions.GetTimeoutError):
                continue
            for key, value in counts.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def collect(self, calls: Sequence[tuple[int, Any]]) -> list[Trajectory]:
        """The trajectories of launched shards, in spec order; raises WorkersDied naming the dead workers."""
        import ray

        out: list[Trajectory] = []
        dead: dict[int, str] = {}
        for i, ref in calls:
            try:
                out.extend(ray.get(ref))
            except died_errors() as err:
                if getattr(err, "actor_init_failed", False):
                    raise WorkerStartError(f"{self.name(i)} failed to start: {err}") from err
                dead[i] = f"{type(err).__name__}: {err}"
        if dead:
            raise WorkersDied(sorted(dead), "; ".join(f"{self.name(i)}: {d}" for i, d in dead.items()))
        return out

    def peak_rss_gib(self) -> float:
        """The largest peak resident memory of the live workers, GiB (a worker that does not answer: skipped)."""
        import ray

        peaks = []
        for worker in self.workers:
            try:
                peaks.append(ray.get(worker.peak_rss_gib.remote(), timeout=60))
            except (*died_errors(), ray.exceptions.GetTimeoutError):
                continue
        return max(peaks, default=0.0)

    def replace(self, indices: Sequence[int], why: str) -> None:
        """New actors in the dead workers' bundles, loaded with the current weights.

        The old actor is killed first: one that was only unreachable would otherwise keep its bundle. A
        replacement can die too when its bundle's node is dead but not yet known to be (Ray notices a lost
        node after missed heartbeats, and re-places its bundles only then): it is replaced again, after a
        wait, up to REPLACE_ATTEMPTS times.
        """
        with self._weights_lock:
            self._replace(indices, why)

    def _replace(self, indices: Sequence[int], why: str) -> None:
        import ray

        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            for i in indices:
                log.error("%s died %s; recreating it with weights version %s", self.name(i), why,
                          None if self.weights is None else self.weights.version)
                ray.kill(self.workers[i])
                self.workers[i] = self._spawn(i)
            if self.weights is None:
                return
            try:
                sync_weights([self.workers[i] for i in indices], [self.name(i) for i in indices],
                             self.weights.version, self.weights.ref)
                return
            except died_errors() as err:
                if getattr(err, "actor_init_failed", False) or attempt == REPLACE_ATTEMPTS:
                    raise
                why = f"again before its first weights (attempt {attempt} of {REPLACE_ATTEMPTS}: its node may be gone)"
                time.sleep(REPLACE_WAIT_S * attempt)

    def _dead(self) -> list[int]:
        """The workers that do not answer (a dead actor raises on any call)."""
        import ray

        dead = []
        for i, w in enumerate(self.workers):
            try:
                ray.get(w.weights_version.remote(), timeout=60)
            except died_errors():
                dead.append(i)
        return dead

    def shutdown(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
