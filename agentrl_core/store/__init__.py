"""Run registry in SQL: runs, stages, checkpoints, metrics and evaluation results (SQLite or PostgreSQL)."""

from agentrl_core.store.errors import RegistryError
from agentrl_core.store.metrics_import import import_stage_metrics
from agentrl_core.store.records import CheckpointRecord, EvalRecord, MetricRecord, RunRecord, StageRecord
from agentrl_core.store.run_registry import Registry, open_registry
from agentrl_core.store.urls import redact_url

__all__ = [
    "CheckpointRecord",
    "EvalRecord",
    "MetricRecord",
    "Registry",
    "RegistryError",
    "RunRecord",
    "StageRecord",
    "import_stage_metrics",
    "open_registry",
    "redact_url",
]
