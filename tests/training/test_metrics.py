"""Training metrics log: JSON lines and TensorBoard scalars, torn lines, resume, non-finite values."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agentrl_core.training import metrics_log
from agentrl_core.training.metrics_log import MetricsWriter, read_metrics


def tb_scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard shows for the run: {tag: [(step, value), ...]}."""
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_log_writes_json_lines_and_tensorboard_scalars(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.log(1, {"loss": 2.5, "reward": 0.25}, prefix="train")
        writer.log(2, {"loss": np.float32(1.5), "reward": torch.tensor(0.5)}, prefix="train/")
        writer.log(2, {"success": 1}, prefix="eval")
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 2]
    assert records[0]["train/loss"] == 2.5 and records[1]["train/reward"] == 0.5
    assert records[2] == {"step": 2, "time": records[2]["time"], "eval/success": 1.0}
    assert all(r["time"] > 1e9 for r in records)
    assert read_metrics(tmp_path) == records  # a run folder works too
    assert tb_scalars(tmp_path) == {
        "train/loss": [(1, 2.5), (2, 1.5)],
        "train/reward": [(1, 0.25), (2, 0.5)],
        "eval/success": [(2, 1.0)],
    }


def test_each_line_is_flushed_as_it_is_logged(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.log(1, {"loss": 1.0})
    assert read_metrics(tmp_path)[0]["loss"] == 1.0  # visible before close
    writer.close()
    writer.close()
    assert not (tmp_path / "tensorboard").exists()
    with pytest.raises(RuntimeError, match="closed"):
        writer.log(2, {"loss": 1.0})


def test_non_finite_values_are_null_in_json_and_absent_from_tensorboard(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.log(1, {"a": float("nan"), "b": float("inf"), "c": 3.0})
    line = (tmp_path / "metrics.jsonl").read_text()
    assert '"a": null' in line and '"b": null' in line and "NaN" not in line and "Infinity" not in line
    assert tb_scalars(tmp_path) == {"c": [(1, 3.0)]}


def test_read_metrics_skips_a_torn_last_line_but_not_a_corrupt_middle_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"step": 2')  # complete JSON can still lack its newline
    assert [r["step"] for r in read_metrics(path)] == [1]
    path.write_text('{"step": 1}\n{"step"\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_metrics(path)


def test_new_writer_trims_a_torn_line_before_appending(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.log(2, {"loss": 0.5})
    assert [(r["step"], r["loss"]) for r in read_metrics(path)] == [(1, 1.0), (2, 0.5)]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_resume_drops_lines_and_events_past_the_resume_step(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        for step in range(1, 6):
            writer.log(step, {"loss": float(step)})
    with MetricsWriter(tmp_path, resume_step=3) as writer:
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
        for step in (4, 5):
            writer.log(step, {"loss": 10.0 * step})
    records = read_metrics(tmp_path)
    assert [(r["step"], r["loss"]) for r in records] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0)]
    assert tb_scalars(tmp_path)["loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0)]


class _CounterFrom:
    """TensorBoard's per-process event-file counter, starting where its text order breaks ("10" < "9")."""

    def __init__(self, start: int) -> None:
        self.value = start - 1

    def get(self) -> int:
        self.value += 1
        return self.value


def test_a_resumed_run_purges_even_when_its_event_file_name_sorts_first_within_a_second(tmp_path, monkeypatch):
    from tensorboard.summary.writer import event_file_writer

    monkeypatch.setattr(event_file_writer, "_global_uid", _CounterFrom(9))  # files ...9 and ...10
    test_resume_drops_lines_and_events_past_the_resume_step(tmp_path)
    first, resumed = sorted((tmp_path / "tensorboard").iterdir(), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    assert first.name.split(".")[3] < resumed.name.split(".")[3]  # opened in a later second: read after


def test_a_new_event_file_waits_for_the_next_second_and_not_for_a_clock_set_back(tmp_path, caplog):
    now = int(time.time())
    (tmp_path / f"events.out.tfevents.{now:010d}.host.1.1").write_bytes(b"")
    metrics_log._after_earlier_event_files(tmp_path)
    assert time.time() >= now + 1
    (tmp_path / f"events.out.tfevents.{now + 100:010d}.host.1.2").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger=metrics_log.__name__):
        before = time.time()
        metrics_log._after_earlier_event_files(tmp_path)
    assert time.time() - before < metrics_log.MAX_CLOCK_WAIT_S and "clock set back" in caplog.text
    metrics_log._after_earlier_event_files(tmp_path / "none")  # no folder yet: nothing to wait for


def test_bad_metric_values_and_reserved_names_fail_clearly(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        with pytest.raises(TypeError, match="metric 'note' must be a number"):
            writer.log(1, {"note": "hello"})
        with pytest.raises(ValueError, match="reserved"):
            writer.log(1, {"step": 3.0})
        writer.log(1, {"step": 3.0}, prefix="env")  # fine under a prefix
    (record,) = read_metrics(tmp_path)
    assert record == {"step": 1, "time": record["time"], "env/step": 3.0}
