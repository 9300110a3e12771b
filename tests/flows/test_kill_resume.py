"""Kill -9 the training process mid-run; the same command resumes from the last complete checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flows.conftest import tiny_overrides

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


STEPS = 12
"""Steps of the run: the kill comes once step 4 is saved, the resumed run trains the rest (12 is enough to show
that no step is lost or logged twice; 40 before cost ~2 minutes more of the suite for the same checks)."""


def _command(model: Path, root: Path) -> list[str]:
    over = tiny_overrides(model, root) + ["sft.enabled=false", "eval.enabled=false", f"trainer.steps={STEPS}",
                                          "trainer.save_every=2", "trainer.keep_last=2"]
    return [str(Path(sys.executable).with_name("agentrl")), "run", "household_grpo", *over]


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp / "prefect")  # the prefect_home fixture's
    return env


def _complete_steps(ckpts: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in ckpts.glob("step_*") if (p / "COMPLETE").exists())


def test_killed_run_resumes_from_last_complete_checkpoint(tiny_model_path, tmp_path, prefect_home):
    root, env = tmp_path / "runs", _env(tmp_path)
    ckpts = root / "tiny" / "grpo" / "checkpoints"
    first = subprocess.Popen(_command(tiny_model_path, root), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not [s for s in _complete_steps(ckpts) if s >= 4] and time.monotonic() < deadline:
        assert first.poll() is None, "the first run ended before it could be killed"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    survived = _complete_steps(ckpts)
    assert survived and max(survived) < STEPS
    second = subprocess.run(_command(tiny_model_path, root), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming grpo from step {max(survived)}" in second.stderr
    steps = [json.loads(line)["step"] for line in (root / "tiny" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # no step lost, none logged twice
    assert _complete_steps(ckpts)[-1] == STEPS
