"""The run report: an evaluation table, a reward-curve plot and a markdown summary on disk."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl_core.evaluation.plots import draw_lines, plt
from agentrl_core.training.metrics import read_metrics

COLUMNS = ("model", "success_rate", "pass@1", "pass@k", "mean_reward", "mean_steps", "n_errors")


@dataclass
class Report:
    """Where the report's files are, and the table rows (JSON-safe)."""

    markdown: Path
    plot: Path | None
    rows: list[dict[str, Any]]


def eval_rows(evals: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per evaluated model, from EvalSummary.to_dict() outputs."""
    rows = []
    for label, s in evals.items():
        pak = s.get("pass_at_k", {})
        k = max((int(x) for x in pak), default=1)
        rows.append({"model": label, "success_rate": round(s["success_rate"], 4),
                     "pass@1": round(float(pak.get(1, pak.get("1", s["success_rate"]))), 4),
                     "pass@k": round(float(pak.get(k, pak.get(str(k), 0.0))), 4), "k": k,
                     "mean_reward": round(s["mean_reward"], 4), "mean_steps": round(s["mean_steps"], 3),
                     "n_errors": s.get("n_errors", 0), "n_tasks": s.get("n_tasks", 0)})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """A GitHub-style markdown table of the rows."""
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |\n" for r in rows)


def plot_curves(stage_dirs: Mapping[str, Path], rows: list[dict[str, Any]], out: Path) -> Path | None:
    """PNG: GRPO reward/success per step, SFT loss per step, held-out success per model."""
    series = {name: read_metrics(Path(d) / "metrics.jsonl") for name, d in stage_dirs.items()
              if (Path(d) / "metrics.jsonl").exists()}
    if not any(series.values()) and not rows:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    _plot_steps(axes[0], series.get("grpo", []), ("reward_mean", "success_rate"), "GRPO rollouts (train tasks)")
    _plot_steps(axes[1], series.get("sft", []), ("loss",), "SFT loss")
    axes[2].bar([r["model"] for r in rows], [r["success_rate"] or 0.0 for r in rows], color="tab:green")
    axes[2].set(title="held-out success", ylim=(0, 1))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def _plot_steps(ax: Any, metrics: list[dict[str, Any]], keys: tuple[str, ...], title: str) -> None:
    """One line per metric key of one stage's metrics.jsonl rows, over steps."""
    series = {key: [(m["step"], m[key]) for m in metrics if m.get(key) is not None] for key in keys}
    draw_lines(ax, series, title=title)


def write_report(run_dir: Path, evals: Mapping[str, Mapping[str, Any]], stage_dirs: Mapping[str, Path],
                 extra: Mapping[str, Any] | None = None) -> Report:
    """Write report/summary.md, report/curves.png and report/eval.json under the run folder."""
    out = Path(run_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = eval_rows(evals)
    plot = plot_curves(stage_dirs, rows, out / "curves.png")
    lines = [f"# agentrl run `{Path(run_dir).name}`", "", "## Evaluation on held-out tasks", "", markdown_table(rows)]
    for key, value in (extra or {}).items():
        lines.append(f"- **{key}**: {value}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "eval.json").write_text(json.dumps({"rows": rows, "evals": evals}, indent=2, default=str))
    return Report(out / "summary.md", plot, rows)
