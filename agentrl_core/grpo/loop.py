"""The GRPO loop, one for every executor and schedule: the algorithm on one screen (`run_loop`).

    for step t = start .. trainer.steps - 1:
        rollout t        tasks, episodes (DAPO refills), experience hooks, rollout log   [rollout thread]
        update on t      advantages + policy loss on the executor's trainer -> version t + 1
        publish t + 1    the new weights to the rollout side
        log, validate, keep the best, checkpoint; stop early when trainer.max_minutes is used up

`distributed.max_policy_lag` = k bounds how far rollouts run ahead: the rollout of step s starts once the
rollout side holds version w with s − w <= k (`LagGate`). k unset or 0: synchronous — the rollout of t + 1
starts after version t + 1 was published, between rollouts (no sample is ever off-policy, as in the
classic loop). k >= 1: asynchronous — the rollout of t + 1 runs while the trainer updates on t, and version
t + 1 reaches it in flight, between two decode steps (the executor must `overlap`: Ray's rollout workers hold
their own weights; in-process the engine samples the trainer's own model, so only k = 0 exists there).
A step that validates first waits for a rollout in flight (validation and rollouts share the engines).

Timing, in this module only: time/rollout_s (the rollout phase: its rounds of episodes), time/train_s (the
update and the publish), time/step_s (wall time between the ends of two steps, everything included),
time/rollout_wait_s and time/trainer_wait_s (each side idle, waiting for the other).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl_core.config import RecipeConfig
from agentrl_core.grpo.executor import Executor
from agentrl_core.grpo.rollout import rollout_batch, rollout_metrics
from agentrl_core.grpo.step_metrics import lag_metrics, rollout_rates, train_rates
from agentrl_core.rollout import Trajectory, write_trajectories
from agentrl_core.training.session import StepCallback
from agentrl_core.evaluation.validation import is_due

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LagGate:
    """The bound: the rollout of `step` may begin on weights of version `held` when step − held <= k."""

    max_lag: int

    def may_start(self, step: int, held: int) -> bool:
        return step - held <= self.max_lag


@dataclass
class Batch:
    """A rolled-out step: every trajectory, the ones that train, the rollout phase's metrics."""

    step: int
    trajs: list[Trajectory]
    usable: list[Trajectory]
    metrics: dict[str, float]
    version: int
    """The weights version the rollout side held when the rollout began."""


@dataclass
class Stage:
    """What the loop runs over: the recipe, the executor, the tasks, where files go, who hears of each step."""

    cfg: RecipeConfig
    executor: Executor
    train_ids: Sequence[int]
    stage_dir: Path
    env_factory: Callable[[], Any]
    val_ids: Sequence[int] = ()
    on_step: StepCallback | None = None
    started: float = field(default_factory=time.monotonic)


def run_loop(stage: Stage) -> tuple[int, dict[str, float]]:
    """Steps executor.start_step .. trainer.steps (or until trainer.max_minutes); (steps done, last metrics)."""
    cfg, ex = stage.cfg, stage.executor
    version, last = ex.start_step, {}
    if stage.val_ids and version == 0:
        ex.log(0, _validate(stage, 0))  # the starting policy: the validation curve's first point
    with Rollouts(stage, LagGate(cfg.distributed.max_policy_lag or 0)) as rollouts:
        while version < cfg.trainer.steps:
            rollouts.launch(version)
            batch = rollouts.take(version)
            metrics = batch.metrics | _update(ex, batch, version, rollouts)
            version += 1
            out_of_time = _out_of_time(cfg, stage.started)
            if stage.val_ids and (is_due(cfg, version) or out_of_time):
                rollouts.drain()  # validation plays on the rollout side's engines
                metrics.update(_validate(stage, version))
            last = _end_step(stage, version, metrics | rollouts.clock(), out_of_time)
            if out_of_time:
                log.info("trainer.max_minutes=%g reached after step %d of %d: stopping", cfg.trainer.max_minutes,
                         version, cfg.trainer.steps)
                break
    if cfg.trainer.steps == 0 and ex.start_step == 0:
        ex.save(0, {})
    return version, last


def _update(ex: Executor, batch: Batch, version: int, rollouts: Rollouts) -> dict[str, float]:
    """The update on `batch` at `version`, then version + 1 published (in flight when a rollout runs)."""
    began = time.monotonic()
    metrics = ex.update(batch.usable) if batch.usable else {}
    ex.publish(version + 1, in_flight=rollouts.running())
    seconds = time.monotonic() - began
    return (metrics | lag_metrics(batch.usable, version, batch.version)
            | {"time/train_s": seconds} | train_rates(batch.usable, seconds))


def _validate(stage: Stage, step: int) -> dict[str, float]:
    """The val/* metrics of the current policy; the best checkpoint kept when they beat it."""
    metrics = stage.executor.validate(stage.val_ids)
    if stage.cfg.trainer.export_best:
        stage.executor.keep_best(step, metrics)
    return metrics


def _end_step(stage: Stage, step: int, metrics: dict[str, float], out_of_time: bool) -> dict[str, float]:
    """Log the step, checkpoint it when due (or when the time is up), tell the caller."""
    cfg, ex = stage.cfg, stage.executor
    metrics.update(ex.peaks(step, metrics))
    ex.log(step, metrics)
    if step % cfg.trainer.save_every == 0 or step == cfg.trainer.steps or out_of_time:
        ex.save(step, {"metrics": metrics})
    if stage.on_step is not None:
        stage.on_step(step, cfg.trainer.steps, metrics)
    return metrics


def _out_of_time(cfg: RecipeConfig, started: float) -> bool:
    """Whether the stage has used up trainer.max_minutes of wall time."""
    limit = cfg.trainer.max_minutes
    return limit is not None and time.monotonic() - started >= 60 * limit


def rollout_phase(stage: Stage, step: int, version: int) -> Batch:
    """Step `step`'s rollout: its rounds of episodes, the experience hooks, the rollout log, its metrics."""
    cfg, ex = stage.cfg, stage.executor
    before, began = ex.engine_counters(), time.monotonic()
    trajs, usable, rounds = rollout_batch(ex, stage.env_factory, stage.train_ids, step, cfg)
    seconds = time.monotonic() - began
    engine = {f"rollout/{k}": max(0.0, v - before.get(k, 0.0)) for k, v in ex.engine_counters().items()}
    exp = ex.after_rollout(trajs, step) if cfg.experience.enabled else {}
    write_trajectories(stage.stage_dir / "rollout_log" / f"step_{step + 1:06d}.parquet", trajs, step=step + 1)
    metrics = rollout_metrics(trajs) | exp | engine | rollout_rates(trajs, seconds)
    metrics.update({"rollout_rounds": float(rounds), "samples_trained": 0.0, "time/rollout_s": seconds,
                    "memory/rollout_peak_rss_gib": ex.rollout_peak_gib()})
    return Batch(step, trajs, usable, metrics, version)


class Rollouts:
    """The rollout thread and its schedule: at most one rollout in flight, started when the lag gate allows."""

    def __init__(self, stage: Stage, gate: LagGate) -> None:
        if gate.max_lag > 0 and not stage.executor.overlaps:
            raise RuntimeError("this executor cannot roll out during an update: max_policy_lag must be 0 here")
        self.threaded = gate.max_lag > 0  # k = 0 rolls out in this thread: nothing overlaps, Ctrl-C lands at once
        self.stage, self.gate = stage, gate
        self.next = stage.executor.start_step
        self.future: Future[Batch] | None = None
        self.ready: dict[int, Batch] = {}
        now = time.monotonic()
        self.rollout_idle_since = self.trainer_idle_since = self.last_end = now
        self.waits = {"time/rollout_wait_s": 0.0, "time/trainer_wait_s": 0.0}

    def __enter__(self) -> Rollouts:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rollout") if self.threaded else None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:  # a rollout still in flight (after an error) ends when the executor closes
            self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def running(self) -> bool:
        return self.future is not None and not self.future.done()

    def launch(self, version: int) -> None:
        """Start the next step's rollout when none is in flight, one is left, and the lag bound allows it."""
        step = self.next
        if self.future is not None or step >= self.stage.cfg.trainer.steps or not self.gate.may_start(step, version):
            return
        self.waits["time/rollout_wait_s"] = time.monotonic() - self.rollout_idle_since
        self.next += 1
        if self.pool is None:
            self.ready[step] = rollout_phase(self.stage, step, version)
            self.rollout_idle_since = time.monotonic()
        else:
            self.future = self.pool.submit(rollout_phase, self.stage, step, version)

    def take(self, step: int) -> Batch:
        """Step `step`'s batch, waiting for its rollout (the trainer idles meanwhile); starts the next one."""
        waited_from = time.monotonic()
        while step not in self.ready:
            self._collect()
            self.launch(step)  # the lag bound may now allow the next rollout (k >= 1)
        self.waits["time/trainer_wait_s"] = time.monotonic() - waited_from
        self.launch(step)
        return self.ready.pop(step)

    def drain(self) -> None:
        """Wait for the rollout in flight, keeping its batch."""
        if self.future is not None:
            self._collect()

    def _collect(self) -> None:
        assert self.future is not None, "no rollout in flight to wait for"
        batch = self.future.result()  # a rollout's error is the loop's
        self.ready[batch.step] = batch
        self.future, self.rollout_idle_since = None, time.monotonic()

    def clock(self) -> dict[str, float]:
        """The step's wall time (since the last step ended) and both sides' idle times."""
        now = time.monotonic()
        step_s, self.last_end = now - self.last_end, now
        return {"time/step_s": step_s, **self.waits}
