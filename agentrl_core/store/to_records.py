"""Rows ↔ frozen records of the registry (times come back as UTC-aware datetimes on every backend)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from agentrl_core.store.records import CheckpointRecord, EvalRecord, RunRecord, StageRecord
from agentrl_core.store.schema import Checkpoint, EvalResult, Run, Stage

EVAL_KEY_FIELDS = ("checkpoint_uri", "env", "split", "seed", "k", "engine")
EVAL_VALUE_FIELDS = ("n_tasks", "success_rate", "pass_at_k", "reward_mean", "metrics", "step")


def utc(moment: datetime | None) -> datetime | None:
    """`moment` as an aware UTC datetime (SQLite returns naive ones, stored as UTC)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def run_record(row: Run) -> RunRecord:
    return RunRecord(row.id, row.name, row.recipe, row.status, row.flow_run_id, utc(row.created_at),
                     utc(row.updated_at))


def stage_record(row: Stage, run: str) -> StageRecord:
    return StageRecord(row.id, run, row.name, row.index, row.status, row.checkpoint_uri, utc(row.started_at),
                       utc(row.finished_at))


def checkpoint_record(row: Checkpoint, run: str) -> CheckpointRecord:
    return CheckpointRecord(row.id, run, row.stage, row.step, row.uri, row.kind, row.meta, utc(row.created_at))


def eval_values(record: EvalRecord) -> dict[str, Any]:
    """Column values of `record` (key and values; run_id is resolved by the registry)."""
    values = {name: getattr(record, name) for name in EVAL_KEY_FIELDS + EVAL_VALUE_FIELDS}
    values["metrics"] = dict(record.metrics)
    return values


def eval_record(row: EvalResult, run: str | None) -> EvalRecord:
    return EvalRecord(row.checkpoint_uri, row.env, row.split, row.seed, row.k, row.engine, row.n_tasks,
                      row.success_rate, row.pass_at_k, row.reward_mean, row.metrics, run, row.step, row.id,
                      utc(row.created_at))
