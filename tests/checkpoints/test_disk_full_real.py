"""A filesystem that really fills (a 16 MiB tmpfs): checkpoint, metrics, rollout log and registry each
stop with DiskFullError, leave no partial file, keep what was complete, and work again once space is freed.

Mounting needs root (CAP_SYS_ADMIN); where it is not allowed the test is skipped with the reason.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_core.checkpoints import load_checkpoint, resolve_resume, save_checkpoint
from agentrl_core.errors import DiskFullError
from agentrl_core.rollout import Trajectory, write_trajectories
from agentrl_core.store import open_registry
from agentrl_core.training.metrics_log import MetricsWriter, read_metrics

SIZE = "16m"
CHUNK = 1 << 20


@pytest.fixture
def small_fs(tmp_path: Path):
    """A fresh 16 MiB tmpfs mounted at tmp_path/fs, unmounted afterwards."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs Linux and root (CAP_SYS_ADMIN); the injected-ENOSPC tests "
                    "cover the same paths")
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)  # something still open


def fill(mount: Path, leave: int = 0) -> Path:
    """Write a filler file until the filesystem is full, then give back about `leave` bytes."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        block = b"\0" * CHUNK
        while True:  # bounded: at most SIZE / CHUNK + 1 rounds before ENOSPC
            try:
                if os.write(fd, block) < len(block):
                    block = block[: len(block) // 2] or b"\0"
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _trajectory() -> Trajectory:
    return Trajectory(task_id=1, env="countdown", group=1, sample=0, token_ids=list(range(2000)),
                      loss_mask=[1] * 2000, logprobs=[-1.0] * 2000, reward=1.0)


def test_every_write_path_on_a_filesystem_that_really_fills(small_fs, trained, tokenizer):
    model, optimizer, scheduler = trained
    root = small_fs / "run" / "checkpoints"

    def save(step: int) -> Path:
        return save_checkpoint(root, step, model=model, tokenizer=tokenizer, optimizer=optimizer,
                               scheduler=scheduler, state={"note": step})

    first = save(1)
    registry = open_registry(None, small_fs / "run")
    run_id = registry.ensure_run("full", recipe={})
    filler = fill(small_fs)
    try:
        with pytest.raises(DiskFullError) as info:
            save(2)
        assert str(root / "step_000002") in str(info.value) and f"MiB free on {small_fs}" in str(info.value)
        assert sorted(p.name for p in root.iterdir()) == ["step_000001"]  # no partial checkpoint, no temp folder

        # Room for the weights but not the optimizer: torch.save's own error ("unexpected pos"), no errno.
        os.truncate(filler, filler.stat().st_size - _tree_bytes(first / "model") - 48 * 1024)
        with pytest.raises(DiskFullError) as info:
            save(2)
        assert any(marker in str(info.value.__cause__) for marker in ("unexpected pos", "file write failed"))
        assert sorted(p.name for p in root.iterdir()) == ["step_000001"]
        fill(small_fs)  # full again (the filler grows back into the room just freed)

        with pytest.raises(DiskFullError, match="rollout_log"):
            write_trajectories(small_fs / "run" / "rollout_log" / "step_000002.parquet", [_trajectory()] * 50)
        assert not any((small_fs / "run" / "rollout_log").iterdir())

        metrics = {f"metric_{i}": float(i) for i in range(20)}
        with pytest.raises(DiskFullError, match="registry.db"):
            registry.log_metrics(run_id, stage="grpo", step=2, metrics={f"m{i}": 1.0 for i in range(5000)})
        registry.close()

        os.truncate(filler, filler.stat().st_size - 64 * 1024)  # a little room: the metrics file fills mid-line
        with pytest.raises(DiskFullError, match="metrics.jsonl"):
            with MetricsWriter(small_fs / "run", tensorboard=False) as writer:
                for step in range(1, 5001):  # bounded; 64 KiB hold a few hundred lines
                    writer.log(step, metrics)
        text = (small_fs / "run" / "metrics.jsonl").read_text()
        assert text.endswith("\n") and len(read_metrics(small_fs / "run")) == text.count("\n")  # no torn line
    finally:
        filler.unlink()  # the user frees space

    assert resolve_resume(root) == first and load_checkpoint(first)["note"] == 1
    assert save(2) == root / "step_000002" and resolve_resume(root) == root / "step_000002"
    write_trajectories(small_fs / "run" / "rollout_log" / "step_000002.parquet", [_trajectory()])
    with open_registry(None, small_fs / "run") as registry:
        registry.log_metrics(run_id, stage="grpo", step=2, metrics={"m": 1.0})
        assert [m.step for m in registry.metrics(run="full")] == [2]
    last = read_metrics(small_fs / "run")[-1]["step"]
    with MetricsWriter(small_fs / "run", tensorboard=False, resume_step=last) as writer:
        writer.log(last + 1, metrics)
    assert read_metrics(small_fs / "run")[-1]["step"] == last + 1
