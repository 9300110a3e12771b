"""The one GRPO loop over a scripted executor: the schedule's order, its lag bound, the time limit, validation.

The executor here is a fake of the layer below the loop (what it plays and trains is scripted, its seconds are
sleeps); the loop's code is the real one. Every real executor runs through the loop end to end elsewhere
(tests/training/test_golden_loop.py in-process, tests/distributed/test_ray_actors.py on Ray).
"""

from __future__ import annotations

import random
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pytest

from agentrl_core.grpo.loop import LagGate, Stage, run_loop
from agentrl_core.recipes import load_recipe
from agentrl_core.rollout import Trajectory


class ScriptedExecutor:
    """Plays trajectories whose tokens record the version it held, trains by counting; logs every call."""

    def __init__(self, overlaps: bool, seed: int = 0, start: int = 0) -> None:
        self.overlaps, self.start_step, self.rng = overlaps, start, random.Random(seed)
        self.version, self.events, self.lock = start, [], threading.Lock()
        self.logged: dict[int, dict[str, float]] = {}
        self.saved: list[int] = []
        self.validated: list[int] = []
        self.playing = False
        self.spans: dict[str, list[tuple[float, float]]] = {"play": [], "update": []}

    def _event(self, *what: object) -> None:
        with self.lock:
            self.events.append(what)

    def play(self, specs, seed, step):
        self._event("play", step, self.version)
        self.playing, began = True, time.monotonic()
        time.sleep(self.rng.uniform(0.002, 0.02))
        self.playing = False
        self.spans["play"].append((began, time.monotonic()))
        return [Trajectory(task_id=s.task_id, env="fake", group=s.group, sample=s.sample, token_ids=[1, 2, 3],
                           loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], reward=float(s.sample % 2))
                for s in specs]

    def after_rollout(self, trajs, step):
        return {}

    def engine_counters(self):
        return {"retries": 0.0}

    def rollout_peak_gib(self):
        return 1.0

    def update(self, usable):
        self._event("update", self.version, self.playing)
        began = time.monotonic()
        time.sleep(self.rng.uniform(0.002, 0.02))
        self.spans["update"].append((began, time.monotonic()))
        return {"loss": 0.5}

    def overlapped(self) -> bool:
        """Whether some rollout played while an update ran."""
        return any(a < d and c < b for a, b in self.spans["play"] for c, d in self.spans["update"])

    def publish(self, version, in_flight):
        self._event("publish", version, in_flight)
        self.version = version

    def peaks(self, step, metrics):
        return {"memory/peak_rss_gib": 1.0}

    def validate(self, ids):
        assert not self.playing, "validation while a rollout plays"
        self.validated.append(self.version)
        return {"val/success_rate": 0.5}

    def keep_best(self, step, metrics):
        self._event("best", step)

    def log(self, step, metrics):
        self.logged[step] = metrics

    def save(self, step, extra):
        self.saved.append(step)
        return str(step)

    def last_checkpoint(self):
        return str(self.saved[-1])

    def resume_hint(self):
        return nullcontext()

    def close(self):
        pass


def stage(tmp_path: Path, ex: ScriptedExecutor, *overrides: str, val_ids=()) -> Stage:
    cfg = load_recipe("countdown_grpo", [f"run.root={tmp_path}", "trainer.save_every=2", "rollout.tasks_per_step=2",
                                         "rollout.group_size=2", *overrides])
    return Stage(cfg, ex, list(range(20)), tmp_path, lambda: None, val_ids)


def test_synchronous_order_is_rollout_update_publish(tmp_path: Path) -> None:
    ex = ScriptedExecutor(overlaps=False)
    done, last = run_loop(stage(tmp_path, ex, "trainer.steps=3"))
    assert done == 3 and last["loss"] == 0.5
    assert ex.events == [("play", 0, 0), ("update", 0, False), ("publish", 1, False),
                         ("play", 1, 1), ("update", 1, False), ("publish", 2, False),
                         ("play", 2, 2), ("update", 2, False), ("publish", 3, False)]
    assert sorted(ex.logged) == [1, 2, 3] and ex.saved == [2, 3]  # save_every=2 and the last step
    assert not ex.overlapped()
    for m in ex.logged.values():
        assert m["lag/max"] == 0.0 and m["time/step_s"] > 0 and m["rollout/retries"] == 0.0
        assert {"time/rollout_s", "time/train_s", "time/trainer_wait_s", "time/rollout_wait_s",
                "memory/rollout_peak_rss_gib", "memory/peak_rss_gib", "reward_mean"} <= set(m)
    assert (tmp_path / "rollout_log" / "step_000003.parquet").is_file()


@pytest.mark.parametrize("k", [1, 2])
def test_asynchronous_rollouts_run_ahead_at_most_k_versions(tmp_path: Path, k: int) -> None:
    ex = ScriptedExecutor(overlaps=True, seed=k)
    done, _ = run_loop(stage(tmp_path, ex, "trainer.steps=12", f"distributed.max_policy_lag={k}",
                            "distributed.backend=ray", "algorithm.tis_cap=2.0"))
    assert done == 12
    plays = {step: held for kind, step, held in (e for e in ex.events if e[0] == "play")}
    assert sorted(plays) == list(range(12))
    assert all(0 <= step - held <= k for step, held in plays.items())  # begun by weights at most k updates old
    assert max(m["lag/max"] for m in ex.logged.values()) >= 1  # and some did run ahead
    assert ex.overlapped()
    assert any(kind == "publish" and flight for kind, _, flight in (e for e in ex.events if e[0] == "publish"))


def test_asynchronous_needs_an_executor_that_overlaps(tmp_path: Path) -> None:
    ex = ScriptedExecutor(overlaps=False)
    with pytest.raises(RuntimeError, match="max_policy_lag must be 0"):
        run_loop(stage(tmp_path, ex, "trainer.steps=2", "distributed.max_policy_lag=1", "distributed.backend=ray",
                       "algorithm.tis_cap=2.0"))


def test_validation_waits_for_the_rollout_in_flight_and_keeps_the_best(tmp_path: Path) -> None:
    ex = ScriptedExecutor(overlaps=True, seed=3)
    run_loop(stage(tmp_path, ex, "trainer.steps=4", "trainer.val_every=2", "trainer.export_best=true",
                   "distributed.max_policy_lag=1", "distributed.backend=ray", "algorithm.tis_cap=2.0",
                   val_ids=[100, 101]))
    assert ex.validated == [0, 2, 4]  # before training, then every 2 steps: the published version
    assert 0 in ex.logged and "val/success_rate" in ex.logged[0] and "val/success_rate" in ex.logged[4]
    assert ("best", 2) in ex.events


def test_the_time_limit_stops_and_checkpoints_on_every_executor(tmp_path: Path) -> None:
    ex = ScriptedExecutor(overlaps=False)
    done, _ = run_loop(stage(tmp_path, ex, "trainer.steps=50", "trainer.max_minutes=0.0001"))
    assert done == 1 and ex.saved == [1]  # out of time after the first step: saved there


def test_a_resumed_stage_starts_at_its_checkpoint(tmp_path: Path) -> None:
    ex = ScriptedExecutor(overlaps=False, start=2)
    done, _ = run_loop(stage(tmp_path, ex, "trainer.steps=3"))
    assert done == 3 and [e for e in ex.events if e[0] == "play"] == [("play", 2, 2)]


def test_the_gate() -> None:
    assert LagGate(0).may_start(3, 3) and not LagGate(0).may_start(4, 3)
    assert LagGate(2).may_start(5, 3) and not LagGate(2).may_start(6, 3)
