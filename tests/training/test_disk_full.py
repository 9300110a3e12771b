"""A full disk under the metrics file, TensorBoard, the rollout log, and a whole GRPO stage: no torn or
partial file, one DiskFullError naming the path (never buried by a later failing write), and resume."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path

import pytest
import torch
from tensorboard.compat.tensorflow_stub.io.gfile import LocalFileSystem

import agentrl_core.rollout.io as rollout_io
from agentrl_core.errors import DiskFullError
from agentrl_core.recipes import load_recipe
from agentrl_core.rollout import Trajectory, read_trajectories, write_trajectories
from agentrl_core.grpo import train_grpo
from agentrl_core.training.metrics_log import MetricsWriter, read_metrics
from tests.training.test_metrics import tb_scalars
from tests.training.test_recipes_train import tiny


# TensorBoard's writer thread dies with the ENOSPC and prints it (threading.excepthook) before we re-raise it.
tb_thread_dies = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def _cut_writes_to(monkeypatch, fd: int) -> list[int]:
    """os.write to `fd` writes half of what it is given, then fails with ENOSPC (a disk filling mid-line);
    writes to any other descriptor go through. Returns the byte counts that landed."""
    real = os.write
    landed: list[int] = []

    def write(target: int, data) -> int:
        if target != fd:
            return real(target, data)
        if landed:
            raise _enospc()
        landed.append(real(target, bytes(data[: max(1, len(data) // 2)])))
        return landed[-1]

    monkeypatch.setattr(os, "write", write)
    return landed


def test_a_full_disk_mid_line_leaves_no_torn_metrics_line(tmp_path, monkeypatch):
    with pytest.raises(DiskFullError) as info:
        with MetricsWriter(tmp_path, tensorboard=False) as writer:
            writer.log(1, {"loss": 1.0})
            landed = _cut_writes_to(monkeypatch, writer._fd)
            writer.log(2, {"loss": 0.5})
    assert landed and landed[0] > 0  # half a line did reach the file before the disk filled
    assert str(tmp_path / "metrics.jsonl") in str(info.value) and "MiB free on" in str(info.value)
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text.endswith("\n") and [r["step"] for r in read_metrics(tmp_path)] == [1]  # cut back to the last record
    monkeypatch.undo()

    with MetricsWriter(tmp_path, tensorboard=False, resume_step=1) as writer:  # space freed: the run goes on
        writer.log(2, {"loss": 0.5})
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [(1, 1.0), (2, 0.5)]


@tb_thread_dies
def test_tensorboard_on_a_full_disk_raises_disk_full_naming_its_folder(tmp_path, monkeypatch):
    writer = MetricsWriter(tmp_path)
    writer.log(1, {"loss": 1.0})
    writer.flush()
    monkeypatch.setattr(LocalFileSystem, "append", lambda *a, **k: (_ for _ in ()).throw(_enospc()))
    with contextlib.suppress(DiskFullError):  # TensorBoard writes in its own thread: log() may not see it yet
        writer.log(2, {"loss": 0.5})
    with pytest.raises(DiskFullError, match="tensorboard"):  # flush waits for the thread: it always does
        writer.flush()
    with pytest.raises(DiskFullError, match="tensorboard"):  # closing on a full disk says so too, once
        writer.close()
    writer.close()  # and a second close is harmless
    monkeypatch.undo()
    assert tb_scalars(tmp_path)["loss"] == [(1, 1.0)]


@tb_thread_dies
def test_the_first_error_is_the_one_raised_when_closing_fails_too(tmp_path, monkeypatch, caplog):
    """The checkpoint's DiskFullError must not be replaced by TensorBoard failing on the same disk at close."""
    first = DiskFullError(str(tmp_path / "checkpoints" / "step_000002"), 0, "/")
    with pytest.raises(DiskFullError) as info:
        with MetricsWriter(tmp_path) as writer:
            writer.log(1, {"loss": 1.0})
            writer.flush()
            monkeypatch.setattr(LocalFileSystem, "append", lambda *a, **k: (_ for _ in ()).throw(_enospc()))
            with contextlib.suppress(DiskFullError):  # TensorBoard's thread may fail before log() returns
                writer.log(2, {"loss": 0.5})
            raise first  # e.g. the checkpoint of step 2 did not fit; closing the writer then fails too
    assert info.value is first
    assert "closing the metrics writer" in caplog.text and "tensorboard" in caplog.text  # it did fail, quietly


def _trajectory(task_id: int) -> Trajectory:
    return Trajectory(task_id=task_id, env="countdown", group=task_id, sample=0, token_ids=[1, 2, 3],
                      loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], reward=1.0)


def test_a_full_disk_while_writing_the_rollout_log_leaves_no_partial_file(tmp_path, monkeypatch):
    log_dir = tmp_path / "rollout_log"
    write_trajectories(log_dir / "step_000001.parquet", [_trajectory(1)], step=1)
    real = rollout_io.pq.write_table

    def half_then_full(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a parquet")
        raise _enospc()

    monkeypatch.setattr(rollout_io.pq, "write_table", half_then_full)
    with pytest.raises(DiskFullError) as info:
        write_trajectories(log_dir / "step_000002.parquet", [_trajectory(2)], step=2)
    assert str(log_dir / "step_000002.parquet") in str(info.value)
    assert sorted(p.name for p in log_dir.iterdir()) == ["step_000001.parquet"]  # no partial, no temp file
    monkeypatch.setattr(rollout_io.pq, "write_table", real)
    write_trajectories(log_dir / "step_000002.parquet", [_trajectory(2)], step=2)
    assert [t.task_id for t in read_trajectories(log_dir / "step_000002.parquet")] == [2]


def _fail_second_optimizer_save(monkeypatch) -> list[str]:
    """torch.save of the second checkpoint's optimizer fails as on a real full disk (no errno, nearly no
    space), and from then on TensorBoard cannot write either (the same disk)."""
    import agentrl_core.system.diskfull as diskfull

    real, saves = torch.save, []

    def save(obj, path, *args, **kwargs):
        if Path(path).name == "optimizer.pt":
            saves.append(str(path))
            if len(saves) == 2:
                monkeypatch.setattr(diskfull, "free_bytes", lambda where: 2**20)
                monkeypatch.setattr(LocalFileSystem, "append", lambda *a, **k: (_ for _ in ()).throw(_enospc()))
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    return saves


@tb_thread_dies
def test_a_grpo_stage_stops_once_on_a_full_disk_and_resumes(tiny_model_path, env_server_url, tmp_path, monkeypatch):
    cfg = load_recipe("countdown_grpo", tiny(tiny_model_path, tmp_path) + ["trainer.steps=2", "trainer.save_every=1"])
    stage = tmp_path / "grpo"
    saves = _fail_second_optimizer_save(monkeypatch)
    with pytest.raises(DiskFullError) as info:
        train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    assert len(saves) == 2
    assert str(info.value).startswith(f"no space left on device writing {stage / 'checkpoints' / 'step_000002'} (1 MiB")
    assert str(info.value).endswith("free space and run the same command again to resume from step 1")
    assert sorted(p.name for p in (stage / "checkpoints").iterdir()) == ["step_000001"]
    monkeypatch.undo()

    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    assert result.resumed_from == 1 and result.steps == 2 and Path(result.checkpoint).name == "step_000002"
    assert [r["step"] for r in read_metrics(stage)] == [1, 2]  # step 2's line from the failed run was dropped
    assert sorted(p.name for p in (stage / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert json.loads((stage / "checkpoints" / "step_000002" / "trainer_state.json").read_text())["step"] == 2
