"""Every flow's run record ends truthfully (tasks/lifecycle.py): completed on success, failed on an exception,
interrupted on Ctrl-C, through real Prefect (test harness) and a real SQLite registry.

The failure and the signal are injected into the first task each flow's body calls (a flow's own work is tested
elsewhere: test_train_flow, test_sft_flow, test_curriculum and test_eval_flows assert "completed" at the end of
their real runs); SIGINT is sent to this process by that task, as Ctrl-C sends it to a run.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agentrl_core.store import open_registry
from agentrl_core.system import stop_signals

OVERRIDES = ["run.name=life", "env.test_tasks=1", "trainer.steps=1"]


@pytest.fixture
def signals_restored():
    """Ctrl-C handled as Python's default in this test (a background pytest may ignore SIGINT), and the
    handlers and the recorded signal as they were afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_signals.reset_for_tests()
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    stop_signals.reset_for_tests()


def boom(*args, **kwargs):
    raise RuntimeError("boom: injected failure")


def ctrl_c(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)  # the handler raises here
    raise AssertionError("SIGINT did not stop the run")


def run_flow(name: str, root: Path):
    """Call flow `name` with the settings that reach its first task (the one patched)."""
    if name == "train":
        from flows.train import train

        return train(recipe_file="household_grpo", overrides=[f"run.root={root}", *OVERRIDES])
    if name == "sft":
        from flows.sft import sft

        return sft(recipe_file="household_grpo", overrides=[f"run.root={root}", *OVERRIDES])
    if name == "curriculum":
        from flows.curriculum import curriculum

        return curriculum(curriculum_file="bfcl", overrides=[f"run.root={root}", *OVERRIDES])
    from agentrl_core.evaluation.batch import EvalGrid
    from flows.evaluate import batch_eval, nightly_eval

    if name == "batch-eval":
        return batch_eval(EvalGrid(checkpoints=["nowhere"], envs=["household"]), root=str(root),
                          report_dir=str(root / "board"))
    return nightly_eval(envs=["household"], root=str(root), report_dir=str(root / "board"))


FIRST_TASK = {"train": ("flows.train", "import_model"), "sft": ("flows.sft", "import_model"),
              "curriculum": ("flows.curriculum", "import_model"), "batch-eval": ("flows.evaluate", "env_servers"),
              "nightly-eval": ("flows.evaluate", "find_pending")}
"""Each flow's first call inside its run lifecycle."""


def the_record(root: Path, flow: str):
    with open_registry(None, root) as reg:
        runs = [r for r in reg.runs() if r.recipe.get("kind") == flow]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.parametrize("flow", list(FIRST_TASK))
def test_a_failure_ends_the_record_failed(prefect_harness, monkeypatch, tmp_path, flow):
    module, name = FIRST_TASK[flow]
    monkeypatch.setattr(f"{module}.{name}", boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_flow(flow, tmp_path)
    record = the_record(tmp_path, flow)
    assert record.status == "failed" and record.flow_run_id
    if flow in ("train", "sft", "curriculum"):
        assert record.name == "life"
    else:  # named by kind, time and flow run
        assert record.name.startswith(f"{flow}-")


@pytest.mark.parametrize("flow", list(FIRST_TASK))
def test_ctrl_c_ends_the_record_interrupted(prefect_harness, signals_restored, monkeypatch, tmp_path, flow):
    module, name = FIRST_TASK[flow]
    monkeypatch.setattr(f"{module}.{name}", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_flow(flow, tmp_path)
    assert the_record(tmp_path, flow).status == "interrupted"


def test_nightly_with_nothing_to_do_completes(prefect_harness, tmp_path):
    out = run_flow("nightly-eval", tmp_path)
    assert out["evaluated"] == []
    assert the_record(tmp_path, "nightly-eval").status == "completed"


def test_a_rerun_reopens_the_record_and_ends_it_again(prefect_harness, signals_restored, monkeypatch, tmp_path):
    monkeypatch.setattr("flows.sft.import_model", boom)
    with pytest.raises(RuntimeError):
        run_flow("sft", tmp_path)
    assert the_record(tmp_path, "sft").status == "failed"
    monkeypatch.setattr("flows.sft.import_model", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_flow("sft", tmp_path)
    assert the_record(tmp_path, "sft").status == "interrupted"  # one record per run name, its last outcome
