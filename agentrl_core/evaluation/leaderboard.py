"""The leaderboard: evaluation records pooled over seeds, one row per checkpoint × env, best first."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl_core.evaluation.stats import wilson_interval

__all__ = ["COLUMNS", "leaderboard", "to_markdown"]

COLUMNS = ("checkpoint", "run", "step", "env", "success", "95% CI", "pass@k", "reward", "n")
"""Columns of the markdown table (the rows hold more keys, e.g. success_std, split, engine)."""


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation s = sqrt(Σ(x − x̄)² / (n − 1)); std is None below 2 values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _present(records: Sequence[Any], field: str) -> list[float]:
    return [float(v) for v in (getattr(r, field) for r in records) if v is not None]


def _row(records: Sequence[Any]) -> dict[str, Any]:
    first = records[0]
    success, success_std = _mean_std(_present(records, "success_rate"))
    return {
        "checkpoint": first.checkpoint_uri, "run": first.run, "step": first.step, "env": first.env,
        "split": first.split, "k": first.k, "engine": first.engine,
        "success_mean": success, "success_std": success_std,
        "pass_at_k": _mean_std(_present(records, "pass_at_k"))[0],
        "reward_mean": _mean_std(_present(records, "reward_mean"))[0],
        "n_seeds": len(records), "seeds": sorted(r.seed for r in records),
        "n_tasks": max(r.n_tasks for r in records),
    } | _interval(success, max(r.n_tasks for r in records))


def _interval(rate: float | None, n_tasks: int) -> dict[str, float | None]:
    """95% Wilson interval of the pooled success rate with the task as the unit (n = tasks): seeds
    replay the same tasks, so they narrow nothing about how the model does on other tasks."""
    if rate is None or n_tasks <= 0:
        return {"success_ci_low": None, "success_ci_high": None}
    low, high = wilson_interval(rate * n_tasks, n_tasks)
    return {"success_ci_low": low, "success_ci_high": high}


def _rank_key(row: dict[str, Any]) -> tuple:
    """Env by name, then success, pass@k and reward descending (a missing value ranks last)."""
    def desc(value: float | None) -> float:
        return -value if value is not None else math.inf

    return (row["env"], desc(row["success_mean"]), desc(row["pass_at_k"]), desc(row["reward_mean"]),
            row["checkpoint"], row["k"], row["split"], row["engine"])


def leaderboard(records: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per (checkpoint, env, split, k, engine), pooled over its seeds, best first within each env.

    success_mean ± success_std: mean and sample std over seeds of each seed's success rate;
    pass_at_k, reward_mean: means over seeds; n_seeds: seeds pooled; n_tasks: tasks per seed (the largest, if they differ).
    Records whose rates are None (every episode errored) count in n_seeds but not in the means.
    """
    groups: dict[tuple, list[Any]] = defaultdict(list)
    for r in records:
        groups[(r.checkpoint_uri, r.env, r.split, r.k, r.engine)].append(r)
    return sorted((_row(group) for group in groups.values()), key=_rank_key)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _cells(row: dict[str, Any]) -> list[str]:
    success = _pct(row["success_mean"])
    if row["success_std"] is not None:
        success += f" ± {100 * row['success_std']:.1f}"
    reward = "n/a" if row["reward_mean"] is None else f"{row['reward_mean']:.3f}"
    step = "" if row["step"] is None else str(row["step"])
    ci = "n/a" if row["success_ci_low"] is None else \
        f"[{100 * row['success_ci_low']:.1f}, {100 * row['success_ci_high']:.1f}]"
    n = _count(row["n_seeds"], "seed") + " × " + _count(row["n_tasks"], "task")
    return [row["checkpoint"], row["run"] or "", step, row["env"], success, ci,
            f"{_pct(row['pass_at_k'])} (k={row['k']})", reward, n]


def to_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown pipe table of the leaderboard rows (success as mean ± std over seeds and its 95% interval, in %)."""
    lines = [list(COLUMNS), ["---"] * 4 + ["---:"] * 5, *(_cells(r) for r in rows)]
    return "\n".join("| " + " | ".join(str(c).replace("|", "\\|") for c in line) + " |" for line in lines)
