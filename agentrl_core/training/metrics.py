"""Training metrics log: one JSON line per step in `metrics.jsonl`, mirrored to TensorBoard.

Each line is `{"step": int, "time": unix seconds, **metrics}`; non-finite values become
`null` (strict JSON) and are left out of TensorBoard. A crash can tear only the last line,
which `read_metrics` skips and a new `MetricsWriter` trims. Resuming at step S
(`resume_step=S`) drops lines with step > S so the file stays monotonic, and TensorBoard
hides its own events past S (SummaryWriter's `purge_step`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
_RESERVED = ("step", "time")


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
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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


class MetricsWriter:
    """Append-only metrics log of one run (`<run_dir>/metrics.jsonl` and `<run_dir>/tensorboard/`)."""

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, resume_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        _prepare_file(self.path, resume_step)
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge)

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> dict:
        """Append one record for `step`; keys become `prefix/key` when a prefix is given.

        Returns the record as written (non-finite values as None).
        """
        if self._file.closed:
            raise RuntimeError(f"MetricsWriter for {self.run_dir} is closed")
        now = time.time()
        values = {self._name(prefix, key): _to_float(key, value) for key, value in metrics.items()}
        clash = [k for k in values if k in _RESERVED]
        if clash:
            raise ValueError(f"metric names {clash} are reserved for the record itself; rename them or pass a prefix")
        record = {"step": int(step), "time": now, **{k: v if math.isfinite(v) else None for k, v in values.items()}}
        # One write call per line, so a crash tears at most this line.
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        if self._tb is not None:
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
            self._tb.flush()

    def close(self) -> None:
        """Flush and close both outputs; calling it twice is harmless."""
        if not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
