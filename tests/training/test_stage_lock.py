"""One writer per stage directory: a second run writing the same stage is refused before it writes anything,
and a writer that dies leaves no stale lock behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_core.recipes import load_recipe
from agentrl_core.grpo import ALGORITHM_FILE, train_grpo
from agentrl_core.training.sft import train_sft
from agentrl_core.training.stage_lock import LOCK_NAME, StageBusyError, stage_writer

HOLDER = ("import sys, time; from pathlib import Path; from agentrl_core.training.stage_lock import stage_writer\n"
          "with stage_writer(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)\n")


def _hold_in_another_process(stage: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(stage)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_with_the_holder_named_and_a_dead_one_leaves_no_lock(tmp_path: Path) -> None:
    stage = tmp_path / "run" / "grpo"
    proc = _hold_in_another_process(stage)
    try:
        with pytest.raises(StageBusyError, match=rf"being written by another run \(pid {proc.pid} since .*run.name"):
            with stage_writer(stage):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # killed, as the OOM killer would: no cleanup ran
        proc.wait(timeout=30)
    with stage_writer(stage):  # the kernel dropped its lock with the process
        assert (stage / LOCK_NAME).read_text().startswith(f"pid {os.getpid()} ")
    with stage_writer(stage):  # and released on leaving the block: the same run resumes
        with pytest.raises(StageBusyError):  # a second stage of this process on the same directory is refused too
            with stage_writer(stage):
                pass


def test_training_stages_refuse_a_held_directory_before_writing(tiny_model_path: Path, tmp_path: Path) -> None:
    cfg = load_recipe("countdown_grpo", [f"model.name={tiny_model_path}", f"run.root={tmp_path}",
                                         "model.compute_dtype=float32"])
    for stage, train in (("sft", train_sft), ("grpo", train_grpo)):
        with stage_writer(cfg.run_dir / stage):
            with pytest.raises(StageBusyError, match=f"{stage} is being written"):
                train(cfg, init_model=tiny_model_path, env_url="http://127.0.0.1:9")  # no env server is needed
        assert sorted(p.name for p in (cfg.run_dir / stage).iterdir()) == [LOCK_NAME]  # nothing else written
    assert not (cfg.run_dir / "grpo" / ALGORITHM_FILE).exists()
