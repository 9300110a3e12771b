"""`agentrl run` stopped by signals in each phase: quick exit, state recorded, no process left, resume works.

The signals are Ctrl-C (SIGINT to the process group), SIGTERM to the group, SIGTERM to the main process
alone and SIGKILL of the main process; the phases SFT, GRPO rollout, GRPO update and evaluation. Each
phase gets a chain of two runs (PLAN): the first is stopped by one signal, the second must resume from
the checkpoint the first kept and is stopped by another. Over the four phases every signal lands in two
phases and is followed by a resumed run once: the smallest set of runs that stops every phase with two
signals and resumes after every signal (`test_the_plan_covers_every_signal_phase_and_resume` checks it).
Each signal lands in the phase, found by the files the run writes (metrics lines, rollout logs,
checkpoints, exports); after each, the run must exit within BOUND_S, its flow run be stored Crashed in
Prefect's database (SIGKILL leaves it Running), and no process it started (recorded from /proc just before
the signal) may survive — the temporary Prefect server each run starts included. A run that completes, or
fails, must not leave one either.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.flows.conftest import tiny_overrides

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 20.0  # the first signal to the exit of the main process (a few seconds measured; the machine is shared)
CHILDREN_GONE_S = 15.0
pytestmark = pytest.mark.slow
SIGNALS = [("SIGINT to the group", signal.SIGINT, True), ("SIGTERM to the group", signal.SIGTERM, True),
           ("SIGTERM to the main process", signal.SIGTERM, False),
           ("SIGKILL of the main process", signal.SIGKILL, False)]


# -- the processes of a run ----------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] == "Z" else fields[19]  # field 22 of stat: start time (guards against pid reuse)


def descendants(root: int) -> dict[int, str]:
    """{pid: start time} of `root` and every process below it, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if (start := _start_time(pid)) is not None:
            found[pid] = start
            todo.extend(children.get(pid, []))
    return found


def survivors(procs: dict[int, str], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while (alive := [p for p, start in procs.items() if _start_time(p) == start]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


# -- one run -------------------------------------------------------------------------------------
class Run:
    """`agentrl run household_grpo` with the tiny model, in its own process group, output in a log."""

    def __init__(self, overrides: list[str], home: Path, index: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env["PREFECT_HOME"] = str(home / "prefect")
        self.log = home / f"run{index}.log"
        self.started = time.time()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(Path(sys.executable).with_name("agentrl")), "run", "household_grpo",
                                          *overrides], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until(self, ready: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s:\n{self.text()[-3000:]}"
            time.sleep(0.02)

    def stop(self, sig: int, group: bool) -> tuple[float, dict[int, str]]:
        """Send the signal; (seconds until the main process exited, the processes of the run before it)."""
        procs = descendants(self.proc.pid)
        start = time.monotonic()
        (os.killpg if group else os.kill)(self.proc.pid, sig)
        try:
            self.proc.wait(BOUND_S * 3)
        except subprocess.TimeoutExpired:
            pass
        return time.monotonic() - start, procs

    def kill_leftovers(self, procs: dict[int, str]) -> None:
        for pid in survivors(procs, 0):
            os.kill(pid, signal.SIGKILL)


# -- the phases ----------------------------------------------------------------------------------
def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _complete_steps(stage_dir: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (stage_dir / "checkpoints").glob("step_*")
                  if (p / "COMPLETE").exists())


@dataclass
class Phase:
    """A phase to interrupt: the stage whose checkpoints resume it, and the recipe overrides that make it long."""

    stage: str
    overrides: list[str]

    def ready(self, run: Run, run_dir: Path, resumed: int) -> Callable[[], bool]:
        """A check that is true once the run is inside this phase (past the step it resumed from)."""
        raise NotImplementedError

    def landed(self, run_dir: Path) -> str | None:
        """Why the signal, seen from the files after the exit, did not land in this phase; None when it did."""
        raise NotImplementedError


class Sft(Phase):
    steps = 300

    def ready(self, run: Run, run_dir: Path, resumed: int) -> Callable[[], bool]:
        return lambda: _lines(run_dir / "sft" / "metrics.jsonl") > resumed + 1  # two steps of this run done

    def landed(self, run_dir: Path) -> str | None:
        return "SFT had finished" if _complete_steps(run_dir / "sft")[-1:] == [self.steps] else None


class Rollout(Phase):
    def ready(self, run: Run, run_dir: Path, resumed: int) -> Callable[[], bool]:
        grpo = run_dir / "grpo"

        def in_rollout() -> bool:  # the rollout of step k + 1 is under way
            k = _lines(grpo / "metrics.jsonl")
            if resumed == 0:  # a fresh run: after step k is logged and saved (a checkpoint to resume from)
                started = k > 0 and k in _complete_steps(grpo)
            else:  # a resumed run: once it has opened its session, the first rollout begins
                started = k == resumed and f"resuming grpo from step {resumed}" in run.text()
            if not started:
                return False
            time.sleep(0.5)  # past the step callback or the engine's construction
            return not (grpo / "rollout_log" / f"step_{k + 1:06d}.parquet").exists()
        return in_rollout

    def landed(self, run_dir: Path) -> str | None:
        grpo = run_dir / "grpo"
        k = _lines(grpo / "metrics.jsonl")
        return "the rollout had finished" if (grpo / "rollout_log" / f"step_{k + 1:06d}.parquet").exists() else None


class Update(Phase):
    def ready(self, run: Run, run_dir: Path, resumed: int) -> Callable[[], bool]:
        grpo = run_dir / "grpo"

        def in_update() -> bool:  # step k rolled out by this run (its rollout log written), not yet logged
            k = _lines(grpo / "metrics.jsonl") + 1
            log = grpo / "rollout_log" / f"step_{k:06d}.parquet"
            return k > max(resumed, 1) and log.exists() and log.stat().st_mtime > run.started
        return in_update

    def landed(self, run_dir: Path) -> str | None:
        grpo = run_dir / "grpo"
        k = _lines(grpo / "metrics.jsonl")
        waiting = (grpo / "rollout_log" / f"step_{k + 1:06d}.parquet").exists()
        return None if waiting else "no rolled-out step was waiting for its update"


class Evaluation(Phase):
    def ready(self, run: Run, run_dir: Path, resumed: int) -> Callable[[], bool]:
        marker = run_dir / "export" / "grpo" / "COMPLETE"

        def evaluating() -> bool:  # this run exported the GRPO model: the evaluations come next
            try:
                exported = json.loads(marker.read_text())["completed_at"] > run.started
            except (OSError, ValueError, KeyError):
                return False
            if exported:
                time.sleep(1.0)  # past the registry record of the export, into evaluating the base model
            return exported
        return evaluating

    def landed(self, run_dir: Path) -> str | None:
        done = (run_dir / "eval" / "base" / "trajectories.parquet").exists()
        return "the base model's evaluation had finished" if done else None


def _phases() -> dict[str, Phase]:
    no_sft = ["sft.enabled=false", "eval.enabled=false", "trainer.save_every=1", "trainer.steps=300"]
    return {
        "sft": Sft("sft", ["eval.enabled=false", f"sft.epochs={Sft.steps}", "sft.save_every=1"]),
        "grpo-rollout": Rollout("grpo", no_sft + ["rollout.sampling.max_new_tokens=96",
                                                  "rollout.max_context_tokens=2048"]),
        "grpo-update": Update("grpo", no_sft + ["rollout.sampling.max_new_tokens=2", "trainer.ppo_epochs=4",
                                                "trainer.micro_batch_tokens=256"]),
        "evaluation": Evaluation("grpo", ["sft.enabled=false", "env.test_tasks=16", "eval.sampling.max_new_tokens=32",
                                          "eval.k=2"]),
    }


def _flow_state(home: Path) -> str:
    with sqlite3.connect(home / "prefect" / "prefect.db") as db:
        row = db.execute("SELECT state_type FROM flow_run ORDER BY created DESC LIMIT 1").fetchone()
    return row[0] if row else "none"


def _resumed_from(stage_dir: Path) -> int:
    steps = _complete_steps(stage_dir)
    return steps[-1] if steps else 0


# -- the plan ------------------------------------------------------------------------------------
PLAN = {"sft": (0, 1), "grpo-rollout": (1, 2), "grpo-update": (2, 3), "evaluation": (3, 0)}
"""Per phase, the SIGNALS (by index) that stop its first run and then its resumed second run."""


def test_the_plan_covers_every_signal_phase_and_resume():
    assert set(PLAN) == set(_phases())
    assert all(len(set(chain)) == 2 for chain in PLAN.values())  # two different signals in every phase
    assert sorted(first for first, _ in PLAN.values()) == list(range(len(SIGNALS)))  # each one resumed after
    assert sorted(i for chain in PLAN.values() for i in chain) == sorted(2 * list(range(len(SIGNALS))))


@pytest.mark.parametrize("name", list(PLAN))
def test_signals_during_a_phase_stop_the_run_and_resume_works(name, tiny_model_path, tmp_path, prefect_home):
    phase, run_dir = _phases()[name], tmp_path / "runs" / "tiny"
    overrides = tiny_overrides(tiny_model_path, tmp_path / "runs") + phase.overrides
    kept = 0
    for index, (label, sig, group) in enumerate(SIGNALS[i] for i in PLAN[name]):
        run = Run(overrides, tmp_path, index)
        run.wait_until(phase.ready(run, run_dir, kept), f"{name} phase ({label})")
        seconds, procs = run.stop(sig, group)
        print(f"{name}: {label}: exit after {seconds:.1f} s, {len(procs)} processes")  # shown with -s
        try:
            assert run.proc.returncode is not None and seconds < BOUND_S, f"{label}: ran {seconds:.1f} s more"
            assert len(procs) >= 4, f"expected the CLI, Prefect's server, the env server and its workers: {procs}"
            assert not survivors(procs, CHILDREN_GONE_S), f"{label}: processes of the run survived"
        finally:
            run.kill_leftovers(procs)
        assert (why := phase.landed(run_dir)) is None, f"{label} did not land in the {name} phase: {why}"
        if sig != signal.SIGKILL:
            assert run.proc.returncode == 128 + sig, run.text()[-3000:]
            assert _flow_state(tmp_path) == "CRASHED"
            assert "Run the same command again to resume" in run.text()
        if index:  # the second run resumed from what the first kept
            assert f"resuming {phase.stage} from step {kept}" in run.text(), run.text()[-3000:]
        kept = _resumed_from(run_dir / phase.stage)
        assert kept > 0, f"{label}: no checkpoint of {phase.stage} was kept"


@pytest.mark.parametrize(("outcome", "extra", "code"), [("completes", [], 0),
                                                        ("fails", ["sft.dataset=/nonexistent/demos.jsonl"], 1)])
def test_no_process_outlives_a_run_that_ends_by_itself(outcome, extra, code, tiny_model_path, tmp_path,
                                                      prefect_database):
    if outcome == "fails":  # a later run's home (migrated database); the run that completes is a first run
        from tests.prefect_home import seed_home

        seed_home(tmp_path / "prefect", prefect_database)
    run = Run(tiny_overrides(tiny_model_path, tmp_path / "runs") + extra, tmp_path, 0)
    seen: dict[int, str] = {}
    while run.proc.poll() is None:  # everything the run starts, as it starts it
        seen.update(descendants(run.proc.pid))
        time.sleep(0.2)
    try:
        assert run.proc.returncode == code, run.text()[-3000:]
        assert len(seen) >= 4, seen
        assert not survivors(seen, CHILDREN_GONE_S), f"a run that {outcome} left processes behind"
    finally:
        run.kill_leftovers(seen)
