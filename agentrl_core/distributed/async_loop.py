"""The asynchronous GRPO loop on Ray: rollout runs ahead of the update, at most `max_policy_lag` versions.

Version v = the weights after v updates; the trainer trains step t's batch at version t. The rollout of
step s may start once the rollout workers were given version w with s − w <= k (`LagGate`). A worker takes
each new version in flight, between two decode steps (`distributed.inflight`), so a sample's tokens may
come from several versions; its lag is t − (version of its first token), the largest over its tokens, and
t − (version of its last token), the smallest. Since its first token's weights are at least w, every lag is
at most k.

Schedule (one rollout and one update in flight at most; rollouts and updates each in step order):
    start the rollout of step s = next   if none is running and s − w <= k
    start the update of step t          if none is running and t's batch is in
    wait for whichever ends first; an update's end offers version t + 1 to the workers at once
With k = 0 this is the synchronous loop exactly: the rollout of t + 1 waits for version t + 1. With k >= 1
the rollout of t + 1 runs on the workers while the trainer updates on t.

Off-policy correction: decoupled PPO with a truncated behaviour weight. The PPO ratio is taken against
pi_old = the trainer's weights before this update (`trainer.old_logprobs: recompute`: with one epoch the
ratio is 1 and its clip inactive, with more epochs it clips the moves of this update), and each token's loss
is weighted by min(pi_old / pi_behaviour, C) (`algorithm.tis_cap` = C, algorithms.tis) where pi_behaviour is
the engine's log-prob of the token as it was sampled, by whichever version sampled it. Truncation keeps the
variance bounded when a lagging token's ratio is large (as in AReaL's decoupled objective and verl's TIS).

Metrics per step, beside the synchronous loop's: lag/max, lag/mean (first-token lags), lag/last_mean
(last-token lags), memory/rollout_peak_rss_gib (the largest rollout worker's peak; memory/peak_rss_gib is
the trainer's: on Ray each side has its own process, so rollout caches and training memory never share one
budget), time/trainer_wait_s (the trainer idle, waiting for this step's batch) and
time/rollout_wait_s (the rollout workers idle, held back by the lag bound or the end of the run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl_core.config import RecipeConfig
from agentrl_core.distributed.cluster import import_ray
from agentrl_core.distributed.inflight import sample_lags
from agentrl_core.distributed.rollout_pool import RolloutPool, WorkersDied, retries_exhausted
from agentrl_core.rollout import Trajectory, write_trajectories
from agentrl_core.rollout.episode import WEIGHT_VERSIONS
from agentrl_core.rollout.grpo_rollout import rollout_metrics, round_specs, step_tasks, usable_trajectories

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LagGate:
    """The bound: the rollout of `step` may begin on weights of version `held` when step − held <= k."""

    max_lag: int

    def may_start(self, step: int, held: int) -> bool:
        return step - held <= self.max_lag


@dataclass
class _Rollout:
    step: int
    specs: list[Any]
    seed: int
    calls: list[tuple[int, Any]]
    began: float
    waited: float  # seconds the workers sat idle before it began
    retries: int = 0


@dataclass
class _Batch:
    trajs: list[Trajectory]
    metrics: dict[str, float]


@dataclass
class _Update:
    step: int
    ref: Any
    began: float
    waited: float  # seconds the trainer sat idle before it began
    batch: _Batch


@dataclass
class _State:
    """Where the loop stands: the version the workers hold, what is in flight, batches waiting for the trainer."""

    version: int
    next_rollout: int
    clock: float
    rollout: _Rollout | None = None
    update: _Update | None = None
    batches: dict[int, _Batch] = field(default_factory=dict)
    rollout_idle_since: float = 0.0
    trainer_idle_since: float = 0.0

    @classmethod
    def at(cls, start: int) -> _State:
        now = time.monotonic()
        return cls(start, start, now, rollout_idle_since=now, trainer_idle_since=now)


def run_async(cfg: RecipeConfig, trainer: Any, pool: RolloutPool, train_ids: Sequence[int], start: int,
              stage_dir: Path, hooks: Any) -> dict[str, float]:
    """Steps start..trainer.steps on the schedule above. `hooks` (the driver's) resolves trainer calls
    (`get`: a dead trainer becomes TrainerDied) and ends each step (`after_step`: log, checkpoint,
    on_step). Returns the last step's metrics."""
    ray, gate, steps = import_ray(), LagGate(cfg.distributed.max_policy_lag or 0), cfg.trainer.steps
    st = _State.at(start)
    last: dict[str, float] = {}
    while st.version < steps:
        _start_rollout(st, gate, pool, train_ids, cfg)
        _start_update(st, trainer)
        shards = _unfinished([ref for _, ref in st.rollout.calls]) if st.rollout else []
        if shards or st.update is not None:  # until a shard or the update ends (never a ready ref: no spinning)
            ray.wait(shards + ([st.update.ref] if st.update else []), num_returns=1)
        if st.rollout is not None and not _unfinished([ref for _, ref in st.rollout.calls]):
            _finish_rollout(st, pool, cfg, stage_dir)
        if st.update is not None and ray.wait([st.update.ref], timeout=0)[0]:
            last = _finish_update(st, trainer, pool, hooks)
            hooks.after_step(st.version, last)
    return last


def _unfinished(refs: list[Any]) -> list[Any]:
    """The refs whose calls have not ended yet (a shard that died counts as ended)."""
    if not refs:
        return []
    return import_ray().wait(refs, num_returns=len(refs), timeout=0)[1]


def _start_rollout(st: _State, gate: LagGate, pool: RolloutPool, train_ids: Sequence[int],
                   cfg: RecipeConfig) -> None:
    """Launch the next step's rollout when none runs, one is left, and the lag bound allows it."""
    step = st.next_rollout
    if st.rollout is not None or step >= cfg.trainer.steps or not gate.may_start(step, st.version):
        return
    specs, seed = round_specs(step_tasks(train_ids, step, cfg), step, 0, cfg)
    now = time.monotonic()
    st.rollout = _Rollout(step, specs, seed, pool.launch(specs, seed), now, now - st.rollout_idle_since)
    st.next_rollout += 1


def _finish_rollout(st: _State, pool: RolloutPool, cfg: RecipeConfig, stage_dir: Path) -> None:
    """Collect the finished rollout; a dead worker is replaced and the step's rollout launched again."""
    ro = st.rollout
    assert ro is not None
    try:
        trajs = pool.collect(ro.calls)
    except WorkersDied as died:
        log.error("step %d: %s (attempt %d of %d)", ro.step + 1, died, ro.retries + 1,
                  cfg.distributed.max_step_retries + 1)
        if ro.retries >= cfg.distributed.max_step_retries:
            raise retries_exhausted(ro.step + 1, ro.retries + 1) from died
        pool.replace(died.indices, f"in the rollout of step {ro.step + 1}")
        ro.calls, ro.retries = pool.launch(ro.specs, ro.seed), ro.retries + 1
        return
    now = time.monotonic()
    write_trajectories(stage_dir / "rollout_log" / f"step_{ro.step + 1:06d}.parquet", trajs, step=ro.step + 1)
    metrics = rollout_metrics(trajs)
    metrics.update({"rollout_rounds": 1.0, "samples_trained": 0.0, "rollout_retries": float(ro.retries),
                    "memory/rollout_peak_rss_gib": pool.peak_rss_gib(),
                    "time/rollout_s": now - ro.began, "time/rollout_wait_s": ro.waited,
                    "rollout_tokens_per_s": sum(t.response_tokens for t in trajs) / max(1e-9, now - ro.began)})
    st.batches[ro.step] = _Batch(trajs, metrics)
    st.rollout, st.rollout_idle_since = None, now


def _start_update(st: _State, trainer: Any) -> None:
    """Send the trainer its next batch (step = the trainer's version) when it is idle and the batch is in."""
    if st.update is not None or st.version not in st.batches:
        return
    batch = st.batches.pop(st.version)
    usable = usable_trajectories(batch.trajs)
    batch.metrics.update(lag_metrics(usable, st.version))
    now = time.monotonic()
    st.update = _Update(st.version, trainer.update.remote(usable), now, now - st.trainer_idle_since, batch)


def _finish_update(st: _State, trainer: Any, pool: RolloutPool, hooks: Any) -> dict[str, float]:
    """The update's metrics (with its batch's); the new version offered to the workers at once."""
    up = st.update
    assert up is not None
    metrics = dict(up.batch.metrics)
    metrics.update(hooks.get(up.ref))
    now = time.monotonic()
    st.version, st.update, st.trainer_idle_since = up.step + 1, None, now
    pool.offer(st.version, trainer.state_dict.remote())  # in flight: a rollout under way switches mid-batch
    usable = usable_trajectories(up.batch.trajs)
    metrics.update({"time/train_s": now - up.began, "time/trainer_wait_s": up.waited, "time/step_s": now - st.clock,
                    "train_tokens_per_s": sum(len(t.token_ids) for t in usable) / max(1e-9, now - up.began)})
    st.clock = now
    return metrics


def lag_metrics(trajs: Sequence[Trajectory], trained_version: int) -> dict[str, float]:
    """lag/max and lag/mean over the samples' first tokens, lag/last_mean over their last tokens (samples
    without version stamps are left out; {} when none has them)."""
    lags = [lag for t in trajs if (lag := sample_lags(t.extra.get(WEIGHT_VERSIONS, []), trained_version))]
    if not lags:
        return {}
    first, last = [a for a, _ in lags], [b for _, b in lags]
    return {"lag/max": float(max(first)), "lag/mean": sum(first) / len(first), "lag/last_mean": sum(last) / len(last)}
