"""Trajectories on disk: one parquet file per step under the run's rollout_log/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl_core.system.atomic_file import atomic_file
from agentrl_core.rollout.trajectory import Trajectory


def write_trajectories(path: Path, trajectories: Sequence[Trajectory], **columns: object) -> Path:
    """Write trajectories as parquet (atomically: temp file, then rename); extra columns are constants.

    A full disk raises DiskFullError naming `path` and leaves neither a partial file nor its temp file."""
    rows = []
    for t in trajectories:
        row = t.to_row()
        row["extra"] = json.dumps(row["extra"])
        row.update(columns)
        rows.append(row)
    table = pa.Table.from_pylist(rows)
    with atomic_file(path) as tmp:  # a failed write (a full disk: DiskFullError) leaves no partial file
        pq.write_table(table, tmp)
    return path


def read_trajectories(path: Path) -> list[Trajectory]:
    """Read back what `write_trajectories` wrote (extra columns are dropped)."""
    fields = set(Trajectory.__dataclass_fields__)
    out = []
    for row in pq.read_table(path).to_pylist():
        data = {k: v for k, v in row.items() if k in fields}
        data["extra"] = json.loads(data.get("extra") or "{}")
        out.append(Trajectory(**data))
    return out
