"""Evaluation metrics: pass@k, per-model summaries of episode results, and comparison tables.

Errored episodes (infrastructure failures) are counted and left out of every rate: scoring
them 0 would blame the model for the harness.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from agentrl_core.evaluation.stats import format_rate, wilson_interval


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples of which c succeeded (Chen et al. 2021).

    pass@k = 1 − C(n−c, k) / C(n, k) = 1 − ∏_{i=n−c+1}^{n} (1 − k/i)   (the product avoids huge
    binomials); 1.0 when n − c < k, i.e. every k-subset holds a success.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}: draw at least k samples per task")
    if not 0 <= c <= n:
        raise ValueError(f"successes c={c} must be between 0 and n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


@dataclass(frozen=True)
class EpisodeResult:
    """One evaluated episode: sample `sample` of task `task_id`."""

    task_id: int
    sample: int
    reward: float
    success: bool
    steps: int
    error: str | None = None  # set when the episode failed for a reason outside the model
    metrics: Mapping[str, float] = field(default_factory=dict)
    """The environment's episode metrics (shares in [0, 1], envs.episode_metrics); {} when it reports none."""


@dataclass(frozen=True)
class EvalSummary:
    """Aggregates of one model's episodes; rates are None when no episode could be scored."""

    n_tasks: int
    n_episodes: int
    k: int
    success_rate: float | None
    mean_reward: float | None
    mean_steps: float | None
    pass_at_k: dict[int, float | None] = field(default_factory=dict)
    pass_at_k_tasks: dict[int, int] = field(default_factory=dict)  # tasks averaged for each pass@j
    n_errors: int = 0
    task_success: dict[int, float] = field(default_factory=dict)
    """Per task with a scored sample: its success rate over those samples (what paired comparisons use)."""
    success_low: float | None = None
    """95% Wilson interval of the success rate, over the `len(task_success)` scored tasks (see `summarize`)."""
    success_high: float | None = None
    metrics: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    """Per episode metric: {"mean", "low", "high", "n"}, its mean over the scored episodes that report it and
    the 95% Wilson interval over the n tasks they cover (as for success)."""
    task_metrics: dict[str, dict[int, float]] = field(default_factory=dict)
    """Per episode metric: task id -> its mean over the task's scored samples (what paired comparisons use)."""

    @property
    def n_scored_tasks(self) -> int:
        return len(self.task_success)

    def success_text(self) -> str:
        """The success rate with its interval and n, e.g. "18.8% [6.6, 43.0] n=16"."""
        return format_rate(self.success_rate, self.success_low, self.success_high, self.n_scored_tasks)

    def to_dict(self) -> dict:
        """JSON-safe dict (pass@k and task keys as strings)."""
        data = asdict(self)
        data["pass_at_k"] = {str(j): v for j, v in self.pass_at_k.items()}
        data["pass_at_k_tasks"] = {str(j): v for j, v in self.pass_at_k_tasks.items()}
        data["task_success"] = {str(t): v for t, v in self.task_success.items()}
        data["task_metrics"] = {m: {str(t): v for t, v in per.items()} for m, per in self.task_metrics.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> EvalSummary:
        """Inverse of `to_dict` (e.g. for a summary passed between tasks as JSON)."""
        fields = dict(data)
        fields["pass_at_k"] = {int(j): v for j, v in data["pass_at_k"].items()}
        fields["pass_at_k_tasks"] = {int(j): v for j, v in data.get("pass_at_k_tasks", {}).items()}
        fields["task_success"] = {int(t): v for t, v in data.get("task_success", {}).items()}
        fields["task_metrics"] = {m: {int(t): v for t, v in per.items()}
                                  for m, per in data.get("task_metrics", {}).items()}
        return cls(**fields)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _group_by_task(results: list[EpisodeResult]) -> dict[int, list[EpisodeResult]]:
    by_task: dict[int, list[EpisodeResult]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for result in results:
        key = (result.task_id, result.sample)
        if key in seen:
            raise ValueError(f"duplicate result for task {result.task_id} sample {result.sample}")
        seen.add(key)
        by_task[result.task_id].append(result)
    return by_task


def _pass_at(by_task: dict[int, list[EpisodeResult]], j: int) -> tuple[float | None, int]:
    """Mean pass@j over tasks with at least j scored samples, and how many tasks that is."""
    scores = []
    for episodes in by_task.values():
        scored = [e for e in episodes if e.error is None]
        if len(scored) >= j:
            scores.append(pass_at_k(len(scored), sum(e.success for e in scored), j))
    return _mean(scores), len(scores)


def summarize(results: list[EpisodeResult], k: int | None = None) -> EvalSummary:
    """Summarise one model's episodes.

    success_rate, mean_reward, mean_steps: means over non-error episodes.
    pass@j for j in {1, k}: per task n = its non-error samples, c = its successes, then the mean
    over tasks with n >= j (`pass_at_k_tasks` says how many). `k` defaults to the largest
    number of samples any task has.
    task_success: each task's success rate over its scored samples. The 95% interval is Wilson's
    around success_rate with n = the scored tasks: with k = 1 that is the usual binomial interval;
    with k > 1 the samples of one task are not independent, so the task, not the episode, is the
    unit (a wider, honest interval).
    """
    if not results:
        raise ValueError("summarize() needs at least one EpisodeResult")
    by_task = _group_by_task(results)
    k = k if k is not None else max(len(episodes) for episodes in by_task.values())
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scored = [r for r in results if r.error is None]
    passes = {j: _pass_at(by_task, j) for j in sorted({1, k})}
    per_task = _task_success(by_task)
    rate = _mean([float(r.success) for r in scored])
    low, high = wilson_interval(rate * len(per_task), len(per_task)) if per_task else (None, None)
    return EvalSummary(
        n_tasks=len(by_task),
        n_episodes=len(results),
        k=k,
        success_rate=rate,
        mean_reward=_mean([float(r.reward) for r in scored]),
        mean_steps=_mean([float(r.steps) for r in scored]),
        pass_at_k={j: value for j, (value, _) in passes.items()},
        pass_at_k_tasks={j: count for j, (_, count) in passes.items()},
        n_errors=len(results) - len(scored),
        task_success=per_task,
        success_low=low,
        success_high=high,
        **episode_metric_summary(by_task),
    )


def episode_metric_summary(by_task: dict[int, list[EpisodeResult]]) -> dict[str, dict]:
    """{"metrics", "task_metrics"} of the scored episodes' metrics (see EvalSummary).

    For metric m: per task, the mean of m over its scored samples that report m; `mean` the mean over
    those episodes; the 95% Wilson interval over the n tasks (m is a share in [0, 1], so mean · n plays
    the successes, as in `summarize`).
    """
    names = sorted({m for eps in by_task.values() for e in eps if e.error is None for m in e.metrics})
    metrics, task_metrics = {}, {}
    for name in names:
        values = {t: [e.metrics[name] for e in eps if e.error is None and name in e.metrics]
                  for t, eps in sorted(by_task.items())}
        per_task = {t: sum(v) / len(v) for t, v in values.items() if v}
        episodes = [x for v in values.values() for x in v]
        mean = sum(episodes) / len(episodes)
        low, high = wilson_interval(mean * len(per_task), len(per_task))
        metrics[name] = {"mean": mean, "low": low, "high": high, "n": len(per_task)}
        task_metrics[name] = per_task
    return {"metrics": metrics, "task_metrics": task_metrics}


def _task_success(by_task: dict[int, list[EpisodeResult]]) -> dict[int, float]:
    """Success rate of each task over its scored samples (tasks with none are left out)."""
    out = {}
    for task, episodes in sorted(by_task.items()):
        scored = [e for e in episodes if e.error is None]
        if scored:
            out[task] = sum(e.success for e in scored) / len(scored)
    return out


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def summary_rows(rows: dict[str, EvalSummary]) -> list[dict]:
    """One JSON-safe dict per model (for a table artifact); None where nothing was scored."""
    return [
        {
            "model": name,
            "success_rate": _rounded(s.success_rate),
            "success_ci_low": _rounded(s.success_low),
            "success_ci_high": _rounded(s.success_high),
            "n_scored_tasks": s.n_scored_tasks,
            "pass@1": _rounded(s.pass_at_k.get(1)),
            "pass@k": _rounded(s.pass_at_k.get(s.k)),
            "k": s.k,
            "mean_reward": _rounded(s.mean_reward),
            "mean_steps": _rounded(s.mean_steps, 2),
            "n_tasks": s.n_tasks,
            "n_errors": s.n_errors,
            **_metric_columns(s),
        }
        for name, s in rows.items()
    ]


def _metric_columns(s: EvalSummary) -> dict[str, float | None]:
    """{m, m_ci_low, m_ci_high} for each episode metric m of one summary."""
    out: dict[str, float | None] = {}
    for name, m in s.metrics.items():
        out |= metric_fields(name, m)
    return out


def metric_fields(name: str, m: Mapping[str, float | int | None]) -> dict[str, float | None]:
    """One episode metric's {"mean", "low", "high", "n"} as table numbers: {m, m_ci_low, m_ci_high}."""
    return {name: _rounded(m["mean"]), f"{name}_ci_low": _rounded(m["low"]), f"{name}_ci_high": _rounded(m["high"])}


def format_metric(m: Mapping[str, float | int | None] | None) -> str:
    """An episode metric as "12.5% [3.5, 36.0] n=16"; "n/a" where there is none."""
    return "n/a" if m is None else format_rate(m["mean"], m["low"], m["high"], int(m["n"]))


def metric_text(s: EvalSummary, name: str) -> str:
    """A summary's episode metric `name` as `format_metric` writes it."""
    return format_metric(s.metrics.get(name))


def _cells(rows: dict[str, EvalSummary]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells shared by the text and markdown tables."""
    ks = {s.k for s in rows.values()}
    mixed = len(ks) > 1  # models sampled differently: say each row's k in its cell
    pass_k = "pass@k" if mixed or not ks else f"pass@{ks.pop()}"

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    def num(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    extra = sorted({m for s in rows.values() for m in s.metrics})  # the environments' episode metrics
    header = ["model", "success [95% CI] n", *(f"{m} [95% CI] n" for m in extra), "pass@1", pass_k,
              "mean reward", "mean steps", "errors"]
    body = [
        [name, s.success_text(), *(metric_text(s, m) for m in extra), pct(s.pass_at_k.get(1)),
         pct(s.pass_at_k.get(s.k)) + (f" (k={s.k})" if mixed else ""),
         num(s.mean_reward, 3), num(s.mean_steps, 1), str(s.n_errors)]
        for name, s in rows.items()
    ]
    return header, body


def render_table(rows: dict[str, EvalSummary]) -> str:
    """Plain-text table, columns aligned (model names left, numbers right)."""
    header, body = _cells(rows)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(line) for line in body)])


def to_markdown(rows: dict[str, EvalSummary]) -> str:
    """Markdown pipe table of the same columns as `render_table`."""
    header, body = _cells(rows)
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = [header, align, *body]
    return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)
