"""Metric plots over training steps: one PNG per metric, one line per run (matplotlib, Agg backend)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from agentrl_core.system.atomic_file import atomic_file

__all__ = ["draw_interval_bars", "draw_lines", "eval_series", "plot_metrics", "plot_registry", "plot_series",
           "training_series"]

Series = Mapping[str, Sequence[tuple[float, float]]]
"""Line label → (x, y) points."""


def draw_lines(ax: Any, series: Series, *, title: str, xlabel: str = "step", ylabel: str = "") -> None:
    """One line with markers per label, points sorted by x; a legend when there is more than one line."""
    drawn = 0
    for label, points in series.items():
        pts = sorted((x, y) for x, y in points if y is not None and math.isfinite(y))
        if pts:
            ax.plot(*zip(*pts), marker="o", label=label)
            drawn += 1
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if drawn > 1:
        ax.legend(fontsize="small")


def draw_interval_bars(ax: Any, names: Sequence[str], rates: Sequence[float | None],
                       lows: Sequence[float | None], highs: Sequence[float | None],
                       *, title: str = "held-out success (95% CI)") -> None:
    """One bar per model at its success rate, its 95% interval [low, high] as an error bar (a missing bound
    or rate draws none), on a 0..1 axis."""
    values = [r or 0.0 for r in rates]
    below = [v - (lo if lo is not None else v) for v, lo in zip(values, lows)]
    above = [(hi if hi is not None else v) - v for v, hi in zip(values, highs)]
    ax.bar(list(names), values, color="tab:green", yerr=[below, above], capsize=4)
    ax.set(title=title, ylim=(0, 1))


def plot_series(series: Series, out: Path, *, title: str, xlabel: str = "step", ylabel: str = "") -> Path:
    """Save one figure of `series` to `out` (a PNG) and return its path."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    draw_lines(ax, series, title=title, xlabel=xlabel, ylabel=ylabel)
    fig.tight_layout()
    try:
        with atomic_file(out) as tmp:  # a full disk leaves the previous PNG, not half of a new one
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return out


def training_series(records: Iterable[Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Training metric rows (run, stage, step, name, value) → {"stage/name": {run: [(step, value)]}}."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        key = f"{r.stage}/{r.name}" if r.stage else r.name
        out[key][r.run].append((float(r.step), float(r.value)))
    return {k: dict(v) for k, v in out.items()}


def eval_series(records: Iterable[Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Evaluation records → {"eval/<env>/success_rate" and "eval/<env>/pass@<k>": {run: [(step, mean)]}}.

    Each point is the mean over the seeds of one checkpoint; records without a run or step (a
    checkpoint the registry does not place in a run) have no place on a steps axis and are left out.
    """
    pooled: dict[tuple[str, str, float], list[float]] = defaultdict(list)
    for r in records:
        if r.run is None or r.step is None:
            continue
        for name, value in (("success_rate", r.success_rate), (f"pass@{r.k}", r.pass_at_k)):
            if value is not None:
                pooled[(f"eval/{r.env}/{name}", r.run, float(r.step))].append(float(value))
    out: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for (key, run, step), values in pooled.items():
        out[key][run].append((step, sum(values) / len(values)))
    return {k: dict(v) for k, v in out.items()}


def _file_name(key: str) -> str:
    """"grpo/reward_mean" → "grpo__reward_mean.png"; anything outside [A-Za-z0-9._@-] becomes "_"."""
    return re.sub(r"[^A-Za-z0-9._@-]", "_", key.replace("/", "__")) + ".png"


def plot_metrics(metrics: Iterable[Any], evals: Iterable[Any], out_dir: Path) -> list[Path]:
    """One PNG per metric under `out_dir`, a line per run; returns the paths sorted by name.

    `metrics`: training rows (run, stage, step, name, value), plotted over training steps;
    `evals`: evaluation records, success rate and pass@k (mean over seeds) over checkpoint steps.
    """
    paths = []
    for key, series in training_series(metrics).items():
        paths.append(plot_series(series, Path(out_dir) / _file_name(key), title=key, xlabel="training step",
                                 ylabel=key.rsplit("/", 1)[-1]))
    for key, series in eval_series(evals).items():
        paths.append(plot_series(series, Path(out_dir) / _file_name(key), title=f"{key} (mean over seeds)",
                                 xlabel="checkpoint step", ylabel=key.rsplit("/", 1)[-1]))
    return sorted(paths)


def plot_registry(registry: Any, runs: Sequence[str], out_dir: Path, *, names: Sequence[str] | None = None) -> list[Path]:
    """`plot_metrics` over the registry's training metrics (optionally only `names`) and evaluations of `runs`."""
    metrics = [m for run in runs for m in registry.metrics(run=run, names=list(names) if names else None)]
    evals = [e for run in runs for e in registry.evals(run=run)]
    return plot_metrics(metrics, evals, out_dir)
