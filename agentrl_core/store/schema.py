"""The run registry's tables (SQLAlchemy 2.0 declarative): runs, stages, checkpoints, metrics, eval results.

The migrations in `migrations/versions/` create exactly these tables; a test compares the two.
Times are UTC. A metric value is NULL when it was not finite (NaN/inf), as in metrics.jsonl.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

URI_LENGTH = 2048
NAME_LENGTH = 255


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base of the registry tables."""


class Run(Base):
    """One pipeline run (e.g. one recipe's SFT → RL → export), named uniquely."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    recipe: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Stage(Base):
    """One stage of a run (sft, rl, export…), in pipeline order `index`."""

    __tablename__ = "stages"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_stages_run_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    index: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    checkpoint_uri: Mapped[str | None] = mapped_column(String(URI_LENGTH))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Checkpoint(Base):
    """A saved checkpoint: a trainer state ("train") or an exported Hugging Face folder ("hf")."""

    __tablename__ = "checkpoints"
    __table_args__ = (Index("ix_checkpoints_run_step", "run_id", "step"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(NAME_LENGTH))
    step: Mapped[int] = mapped_column(Integer)
    uri: Mapped[str] = mapped_column(String(URI_LENGTH), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Metric(Base):
    """One scalar of one training step: (run, stage, step, name) is unique and re-logging updates it."""

    __tablename__ = "metrics"
    __table_args__ = (
        UniqueConstraint("run_id", "stage", "step", "name", name="uq_metrics_run_stage_step_name"),
        Index("ix_metrics_run_stage_name_step", "run_id", "stage", "name", "step"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(NAME_LENGTH))
    step: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    value: Mapped[float | None] = mapped_column(Float)


class EvalResult(Base):
    """One evaluation of a checkpoint: unique per (checkpoint_uri, env, split, seed, k, engine)."""

    __tablename__ = "eval_results"
    __table_args__ = (
        UniqueConstraint("checkpoint_uri", "env", "split", "seed", "k", "engine", name="uq_eval_results_key"),
        Index("ix_eval_results_env", "env"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_uri: Mapped[str] = mapped_column(String(URI_LENGTH))
    env: Mapped[str] = mapped_column(String(NAME_LENGTH))
    split: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    engine: Mapped[str] = mapped_column(String(32))
    n_tasks: Mapped[int] = mapped_column(Integer)
    success_rate: Mapped[float | None] = mapped_column(Float)
    pass_at_k: Mapped[float | None] = mapped_column(Float)
    reward_mean: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    step: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
