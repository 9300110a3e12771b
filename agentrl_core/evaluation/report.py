"""The run report: an evaluation table, a reward-curve plot and a markdown summary on disk."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl_core.system.atomic_file import atomic_file, write_text_atomic
from agentrl_core.evaluation.metrics import format_metric, metric_fields
from agentrl_core.evaluation.plots import draw_interval_bars, draw_lines, plt
from agentrl_core.evaluation.stats import Comparison, compare, format_rate
from agentrl_core.training.metrics_log import read_metrics

COLUMNS = ("model", "success [95% CI] n", "pass@1", "pass@k", "mean_reward", "mean_steps", "n_errors")


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
        low, high, n = s.get("success_low"), s.get("success_high"), len(s.get("task_success", {}))
        rows.append({"model": label, "success [95% CI] n": format_rate(s["success_rate"], low, high, n),
                     "success_rate": round(s["success_rate"], 4),
                     "success_ci_low": None if low is None else round(low, 4),
                     "success_ci_high": None if high is None else round(high, 4), "n_scored_tasks": n,
                     "pass@1": round(float(pak.get(1, pak.get("1", s["success_rate"]))), 4),
                     "pass@k": round(float(pak.get(k, pak.get(str(k), 0.0))), 4), "k": k,
                     "mean_reward": round(s["mean_reward"], 4), "mean_steps": round(s["mean_steps"], 3),
                     "n_errors": s.get("n_errors", 0), "n_tasks": s.get("n_tasks", 0), **_metric_cells(s)})
    return rows


def _metric_cells(s: Mapping[str, Any]) -> dict[str, Any]:
    """Per episode metric m: "m [95% CI] n" (text) and m, m_ci_low, m_ci_high (numbers)."""
    out: dict[str, Any] = {}
    for name, m in s.get("metrics", {}).items():
        out |= {f"{name} [95% CI] n": format_metric(m), **metric_fields(name, m)}
    return out


BEST = "-best"
"""Suffix of a stage's best validated checkpoint ("grpo-best"): compared with what its stage started from."""


def comparisons(evals: Mapping[str, Mapping[str, Any]]) -> list[Comparison]:
    """Each model against the one before it (base → SFT → GRPO), the last against the first, and a stage's
    best validated checkpoint ("grpo-best") against the model its stage started from, on the tasks both
    were scored on; models without per-task results are skipped. Each pair is compared on success and
    then on every episode metric both report (e.g. BFCL's well_formed)."""
    named = [(label, {int(t): float(v) for t, v in s.get("task_success", {}).items()}) for label, s in evals.items()]
    named = [(label, per_task) for label, per_task in named if per_task]
    chain = [item for item in named if not item[0].endswith(BEST)]
    pairs = list(zip(chain[1:], chain[:-1]))
    if len(chain) > 2:
        pairs.append((chain[-1], chain[0]))
    labels = [label for label, _ in chain]
    for best in (item for item in named if item[0].endswith(BEST)):
        stage = best[0][:-len(BEST)]
        if stage in labels and labels.index(stage) > 0:
            pairs.append((best, chain[labels.index(stage) - 1]))
    out = []
    for (a, ta), (b, tb) in pairs:
        if set(ta) & set(tb):
            out.append(compare(ta, tb, (a, b)))
            out += _metric_comparisons(evals[a], evals[b], (a, b))
    return out


def _metric_comparisons(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]) -> list[Comparison]:
    """The pair compared on each episode metric both summaries carry, on the tasks both report it for."""
    ma, mb = a.get("task_metrics", {}), b.get("task_metrics", {})
    out = []
    for metric in sorted(set(ma) & set(mb)):
        ta = {int(t): float(v) for t, v in ma[metric].items()}
        tb = {int(t): float(v) for t, v in mb[metric].items()}
        if set(ta) & set(tb):
            out.append(compare(ta, tb, names, metric=metric))
    return out


def comparison_lines(evals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The comparisons as plain sentences, one per pair."""
    return [c.text() for c in comparisons(evals)]


def table_columns(rows: list[dict[str, Any]]) -> list[str]:
    """COLUMNS, with a "<metric> [95% CI] n" column after success for each episode metric any row has."""
    metric_cols = sorted({c for r in rows for c in r if c.endswith(" [95% CI] n") and c not in COLUMNS})
    return [*COLUMNS[:2], *metric_cols, *COLUMNS[2:]]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """A GitHub-style markdown table of the rows (with a column per episode metric any row has)."""
    cols = table_columns(rows)
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |\n" for r in rows)


def plot_curves(stage_dirs: Mapping[str, Path], rows: list[dict[str, Any]], out: Path) -> Path | None:
    """PNG: GRPO reward/success per step, SFT loss per step, held-out success per model."""
    series = {name: read_metrics(Path(d) / "metrics.jsonl") for name, d in stage_dirs.items()
              if (Path(d) / "metrics.jsonl").exists()}
    if not any(series.values()) and not rows:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    grpo = with_trailing_mean(series.get("grpo", []), "reward_mean", TREND_WINDOW)
    _plot_steps(axes[0], grpo, ("reward_mean", TREND_KEY, "val/success_rate"),
                "GRPO: rollouts (train tasks), validation (held-out)")
    _plot_steps(axes[1], series.get("sft", []), ("loss",), "SFT loss")
    _plot_success(axes[2], rows)
    fig.tight_layout()
    try:
        with atomic_file(out) as tmp:  # a full disk leaves the previous PNG, not half of a new one
            fig.savefig(tmp, dpi=90, format="png")
    finally:
        plt.close(fig)
    return out


TREND_WINDOW = 5
TREND_KEY = f"reward_mean ({TREND_WINDOW}-step mean)"


def with_trailing_mean(metrics: list[dict[str, Any]], key: str, window: int) -> list[dict[str, Any]]:
    """The rows, each with `{key} ({window}-step mean)`: the mean of `key` over this step and the window − 1
    before it (fewer at the start). Each step samples other tasks, so the raw curve carries the batch's
    difficulty; the trailing mean shows the trend."""
    values: list[float] = []
    out = []
    for row in metrics:
        if row.get(key) is not None:
            values.append(float(row[key]))
            row = {**row, f"{key} ({window}-step mean)": sum(values[-window:]) / len(values[-window:])}
        out.append(row)
    return out


def quarter_means(values: Sequence[float]) -> tuple[float, float]:
    """The mean of the first and of the last quarter of `values` (⌊n/4⌋ values each, at least one): a
    trend that one step's batch of tasks does not decide."""
    q = max(1, len(values) // 4)
    return sum(values[:q]) / q, sum(values[-q:]) / q


def trend_lines(metrics: list[dict[str, Any]]) -> list[str]:
    """Plain-words trends of a GRPO stage: training reward in the first and last quarter of the steps, and
    held-out validation success at its first and last check (empty when the stage logged too little)."""
    rewards = [float(m["reward_mean"]) for m in metrics if m.get("reward_mean") is not None]
    lines = []
    if len(rewards) >= 4:
        q = len(rewards) // 4
        first, last = quarter_means(rewards)
        lines.append(f"training reward, mean of the first and last {q} of {len(rewards)} steps: {first:.3f} → {last:.3f}")
    vals = [(m["step"], float(m["val/success_rate"])) for m in metrics if m.get("val/success_rate") is not None]
    if len(vals) >= 2:
        (s0, v0), (s1, v1) = vals[0], vals[-1]
        lines.append(f"validation success (held-out, greedy), first and last check: {v0:.1%} (logged at step {s0}) → "
                     f"{v1:.1%} (step {s1})")
    return lines


def _plot_success(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Held-out success per model with its 95% interval as an error bar."""
    draw_interval_bars(ax, [r["model"] for r in rows], [r["success_rate"] for r in rows],
                       [r.get("success_ci_low") for r in rows], [r.get("success_ci_high") for r in rows])


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
    compared = comparison_lines(evals)
    if compared:
        lines += ["", "## Paired comparisons (same tasks, 95% intervals)", "",
                  *(f"- {line}" for line in compared),
                  "", "A difference counts only when its whole interval is on one side of 0."]
    grpo_metrics = Path(stage_dirs["grpo"]) / "metrics.jsonl" if "grpo" in stage_dirs else None
    trends = trend_lines(read_metrics(grpo_metrics)) if grpo_metrics and grpo_metrics.exists() else []
    if trends:
        lines += ["", "## GRPO training", "", *(f"- {t}" for t in trends)]
    for key, value in (extra or {}).items():
        lines.append(f"- **{key}**: {value}")
    write_text_atomic(out / "summary.md", "\n".join(lines) + "\n")
    write_text_atomic(out / "eval.json", json.dumps({"rows": rows, "evals": evals,
                                                     "comparisons": [c.to_dict() for c in comparisons(evals)]},
                                                    indent=2, default=str))
    return Report(out / "summary.md", plot, rows)
