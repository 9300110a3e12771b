"""Initial registry schema: runs, stages, checkpoints, metrics, eval_results.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_URI = 2048
_NAME = 255


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _runs_and_stages() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(_NAME), nullable=False, unique=True),
        sa.Column("recipe", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("flow_run_id", sa.String(64), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
    )
    op.create_table(
        "stages",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(_NAME), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("checkpoint_uri", sa.String(_URI), nullable=True),
        sa.Column("started_at", _utc(), nullable=True),
        sa.Column("finished_at", _utc(), nullable=True),
        sa.UniqueConstraint("run_id", "name", name="uq_stages_run_name"),
    )


def _checkpoints_and_metrics() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("stage", sa.String(_NAME), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("uri", sa.String(_URI), nullable=False, unique=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
    )
    op.create_index("ix_checkpoints_run_step", "checkpoints", ["run_id", "step"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("stage", sa.String(_NAME), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(_NAME), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.UniqueConstraint("run_id", "stage", "step", "name", name="uq_metrics_run_stage_step_name"),
    )
    op.create_index("ix_metrics_run_stage_name_step", "metrics", ["run_id", "stage", "name", "step"])


def _eval_results() -> None:
    op.create_table(
        "eval_results",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("checkpoint_uri", sa.String(_URI), nullable=False),
        sa.Column("env", sa.String(_NAME), nullable=False),
        sa.Column("split", sa.String(32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("n_tasks", sa.Integer(), nullable=False),
        sa.Column("success_rate", sa.Float(), nullable=True),
        sa.Column("pass_at_k", sa.Float(), nullable=True),
        sa.Column("reward_mean", sa.Float(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.UniqueConstraint("checkpoint_uri", "env", "split", "seed", "k", "engine", name="uq_eval_results_key"),
    )
    op.create_index("ix_eval_results_env", "eval_results", ["env"])


def upgrade() -> None:
    _runs_and_stages()
    _checkpoints_and_metrics()
    _eval_results()


def downgrade() -> None:
    for index, table in (("ix_eval_results_env", "eval_results"), ("ix_metrics_run_stage_name_step", "metrics"),
                         ("ix_checkpoints_run_step", "checkpoints")):
        op.drop_index(index, table_name=table)
    for table in ("eval_results", "metrics", "checkpoints", "stages", "runs"):
        op.drop_table(table)
