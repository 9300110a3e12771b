"""Import a stage's training metrics log (`metrics.jsonl`, as MetricsWriter writes it) into the registry.

The JSONL file is the source of truth (TensorBoard mirrors the same finite values), so only it is
read. Each line `{"step", "time", **metrics}` becomes one row per metric; `null` (a non-finite
value) stays NULL. Re-importing is idempotent: rows are upserted, and rows of the stage past the
file's last step are deleted (a resumed run rewrote its log from there).
"""

from __future__ import annotations

from pathlib import Path

from agentrl_core.store.run_registry import Registry
from agentrl_core.training.metrics_log import METRICS_FILE, read_metrics

_NOT_METRICS = ("step", "time")


def import_stage_metrics(reg: Registry, run_id: int, stage: str, stage_dir: str | Path) -> int:
    """Upsert every metric of `<stage_dir>/metrics.jsonl` under (run_id, stage); returns the value count."""
    path = Path(stage_dir) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_FILE} in {stage_dir}: the stage has not logged metrics there "
                                "(pass the stage's run folder, where MetricsWriter writes)")
    records = read_metrics(path)
    steps = [(int(r["step"]), {k: v for k, v in r.items() if k not in _NOT_METRICS}) for r in records]
    count = reg.log_metrics_many(run_id, stage=stage, records=steps)
    reg.delete_metrics(run_id, stage=stage, after_step=max((s for s, _ in steps), default=-1))
    return count
