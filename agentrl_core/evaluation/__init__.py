"""Evaluation: pass@k, per-model summaries of episode results, and comparison tables."""

from agentrl_core.evaluation.metrics import (
    EpisodeResult,
    EvalSummary,
    pass_at_k,
    render_table,
    summarize,
    summary_rows,
    to_markdown,
)

__all__ = [
    "EpisodeResult",
    "EvalSummary",
    "pass_at_k",
    "render_table",
    "summarize",
    "summary_rows",
    "to_markdown",
]
