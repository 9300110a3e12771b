"""Training metrics log: one JSON line per step in `metrics.jsonl`, mirrored to TensorBoard.

Each line is `{"step": int, "time": unix seconds, **metrics}`; non-finite values become
`null` (strict JSON) and are left out of TensorBoard. A crash can tear only the last line,
which `read_metrics` skips and a new `MetricsWriter` trims. Resuming at step S
(`resume_step=S`) drops lines with step > S so the file stays monotonic, and TensorBoard
hides its own events past S (SummaryWriter's `purge_step`). A new event file is opened in a later
second than every earlier one of the run, so TensorBoard reads it last (see `_after_earlier_event_files`).

A full disk raises one DiskFullError naming the file: a line that could not be written whole is
cut off again (the file ends at its last complete record), and closing the writer while that
error (or any other) is propagating never raises a second, different error over it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from agentrl_core.system.atomic_file import atomic_file
from agentrl_core.system.diskfull import raising_disk_full

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
_RESERVED = ("step", "time")
EVENT_FILE_PREFIX = "events.out.tfevents."
"""An event file's name: `events.out.tfevents.<creation second>.<host>.<pid>.<per-process counter>`."""
MAX_CLOCK_WAIT_S = 2.0
"""The longest wait for the clock to pass an earlier event file's second (a clock set back waits no longer)."""


def _parse_lines(text: str, path: Path) -> tuple[list[dict], bool]:
    """Records of a JSONL text, and whether its last line was torn (invalid JSON, skipped)."""
    records: list[dict] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as err:
            if number == len(lines):  # a crash mid-write can only cut the line being written
                logger.warning("skipping torn last line %d of %s (%s)", number, path, err)
                return records, True
            raise ValueError(f"{path} line {number} is not valid JSON ({err}); only the last line may be torn") from err
    return records, False


def read_metrics(path: str | Path) -> list[dict]:
    """All records of a metrics.jsonl file (or a run folder holding one), skipping a torn last line."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    return _parse_lines(path.read_text(encoding="utf-8"), path)[0]


def _to_float(name: str, value: Any) -> float:
    try:
        return float(value)  # int, float, bool, numpy scalar, one-element tensor
    except (TypeError, ValueError) as err:
        raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}: {value!r}") from err


def _rewrite(path: Path, records: list[dict]) -> None:
    """Replace the file with `records`, atomically (temp file + rename)."""
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())


def _append(fd: int, data: bytes) -> None:
    """Append `data` whole or not at all: after a failed write the file is cut back to its old end."""
    end = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        os.ftruncate(fd, end)  # frees space, so it works on a full disk
        raise


def _prepare_file(path: Path, resume_step: int | None) -> None:
    """Trim a torn tail and, when resuming, every record past `resume_step`."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    records, torn = _parse_lines(text, path)
    kept = records if resume_step is None else [r for r in records if r.get("step", -1) <= resume_step]
    if len(kept) < len(records):
        logger.info("dropping %d metric lines past step %s in %s", len(records) - len(kept), resume_step, path)
    # Appending after a line with no newline would glue two records together: rewrite instead.
    if torn or len(kept) < len(records) or (text and not text.endswith("\n")):
        _rewrite(path, kept)


def _newest_event_second(tb_dir: Path) -> int | None:
    """The creation second in the names of the run's event files, the newest (None: no event file yet)."""
    seconds = [int(field) for field in (p.name[len(EVENT_FILE_PREFIX):].split(".", 1)[0]
                                        for p in tb_dir.glob(EVENT_FILE_PREFIX + "*")) if field.isdigit()]
    return max(seconds, default=None)


def _after_earlier_event_files(tb_dir: Path) -> None:
    """Wait until the clock's second is past every earlier event file's, so that a new file sorts after them.

    TensorBoard reads a run's event files in name order, whose first key is the creation second; within one
    second the rest decides (host, pid, a counter written as text: "10" sorts before "9"), which can put a
    resumed run's file, holding the purge of the steps past the resume, before the file whose steps it purges:
    the purge is then read first and the old steps stay. At most one second's wait (MAX_CLOCK_WAIT_S when the
    clock was set back; past that, a warning and no wait).
    """
    newest = _newest_event_second(tb_dir)
    wait = 0.0 if newest is None else newest + 1 - time.time()
    if wait > MAX_CLOCK_WAIT_S:
        logger.warning("TensorBoard event files in %s are from %.0f s in the future (clock set back?): the new "
                       "file may be read before them", tb_dir, wait)
    elif wait > 0:
        time.sleep(wait)


class MetricsWriter:
    """Append-only metrics log of one run (`<run_dir>/metrics.jsonl` and `<run_dir>/tensorboard/`)."""

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, resume_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.tb_dir = self.run_dir / TENSORBOARD_DIR
        with raising_disk_full(self.path):
            _prepare_file(self.path, resume_step)
            # A raw descriptor, no Python buffer: each line is one os.write, and close() never writes.
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked

            purge = None if resume_step is None else resume_step + 1
            with raising_disk_full(self.tb_dir):
                _after_earlier_event_files(self.tb_dir)
                self._tb = SummaryWriter(log_dir=str(self.tb_dir), purge_step=purge)

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> dict:
        """Append one record for `step`; keys become `prefix/key` when a prefix is given.

        Returns the record as written (non-finite values as None).
        """
        if self._fd is None:
            raise RuntimeError(f"MetricsWriter for {self.run_dir} is closed")
        now = time.time()
        values = {self._name(prefix, key): _to_float(key, value) for key, value in metrics.items()}
        clash = [k for k in values if k in _RESERVED]
        if clash:
            raise ValueError(f"metric names {clash} are reserved for the record itself; rename them or pass a prefix")
        record = {"step": int(step), "time": now, **{k: v if math.isfinite(v) else None for k, v in values.items()}}
        with raising_disk_full(self.path):
            _append(self._fd, (json.dumps(record, allow_nan=False) + "\n").encode("utf-8"))
        if self._tb is not None:
            # TensorBoard writes in a thread: its failure surfaces at a later add_scalar, flush or close.
            with raising_disk_full(self.tb_dir):
                for name, value in values.items():
                    if math.isfinite(value):
                        self._tb.add_scalar(name, value, global_step=int(step), walltime=now)
        return record

    @staticmethod
    def _name(prefix: str, key: str) -> str:
        return f"{prefix.rstrip('/')}/{key}" if prefix else key

    def flush(self) -> None:
        """Push buffered TensorBoard events to disk (JSON lines are flushed as written)."""
        if self._tb is not None:
            with raising_disk_full(self.tb_dir):
                self._tb.flush()

    def close(self) -> None:
        """Flush and close both outputs; calling it twice is harmless."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        tb, self._tb = self._tb, None
        if tb is not None:
            with raising_disk_full(self.tb_dir):
                tb.close()

    def _close_quietly(self) -> None:
        """Close while another error propagates: a failure here is logged, never raised over that error."""
        try:
            self.close()
        except Exception as err:  # noqa: BLE001 - e.g. TensorBoard's flush on the same full disk
            logger.warning("closing the metrics writer of %s failed too (%s); the first error is the one to fix",
                           self.run_dir, err)

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._close_quietly()


class NullWriter:
    """A MetricsWriter that writes nothing: the trainer ranks other than 0 (rank 0 logs the step for all)."""

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> dict:
        return {}

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> NullWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        pass
