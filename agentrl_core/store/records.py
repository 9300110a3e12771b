"""Frozen records returned by the registry, so callers never hold ORM objects or sessions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

RUN_STATUSES = ("running", "completed", "failed", "interrupted")
STAGE_STATUSES = ("pending", "running", "completed", "failed")
CHECKPOINT_KINDS = ("train", "hf")
CheckpointKind = Literal["train", "hf"]


@dataclass(frozen=True)
class RunRecord:
    """One run: unique `name`, its recipe (a JSON dict), status and the Prefect flow run that drives it."""

    id: int
    name: str
    recipe: dict[str, Any]
    status: str
    flow_run_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class StageRecord:
    """One stage of a run, in pipeline order `index`."""

    id: int
    run: str
    name: str
    index: int
    status: str
    checkpoint_uri: str | None
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint of `run` at `step` of `stage`: trainer state ("train") or exported HF folder ("hf")."""

    id: int
    run: str
    stage: str
    step: int
    uri: str
    kind: str
    meta: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class MetricRecord:
    """One scalar: `value` is None where the logged number was not finite."""

    run: str
    stage: str
    step: int
    name: str
    value: float | None


@dataclass(frozen=True)
class EvalRecord:
    """Result of evaluating one checkpoint on one env/split/seed with k samples per task and one engine.

    (checkpoint_uri, env, split, seed, k, engine) is the key: adding it again replaces the result.
    `pass_at_k` is pass@k at this record's k; `metrics` holds everything else (JSON-safe).
    `run`/`step` name the training run and step of the checkpoint when known.
    """

    checkpoint_uri: str
    env: str
    split: str
    seed: int
    k: int
    engine: str
    n_tasks: int
    success_rate: float | None
    pass_at_k: float | None
    reward_mean: float | None
    metrics: dict[str, Any] = field(default_factory=dict)
    run: str | None = None
    step: int | None = None
    id: int | None = None
    created_at: datetime | None = None

    def key(self) -> dict[str, Any]:
        """The unique key as keyword arguments of `Registry.has_eval`."""
        return {"checkpoint_uri": self.checkpoint_uri, "env": self.env, "split": self.split,
                "seed": self.seed, "k": self.k, "engine": self.engine}
