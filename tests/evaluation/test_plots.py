"""Metric plots from the run registry: one valid PNG per metric, a line per run, eval points averaged over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from agentrl_core.evaluation.plots import (
    draw_lines,
    eval_series,
    plot_registry,
    plt,
    training_series,
)
from agentrl_core.evaluation.report import write_report
from agentrl_core.store import EvalRecord, open_registry

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def ev(ckpt: str, run: str | None, step: int | None, seed: int, success: float, pass_k: float) -> EvalRecord:
    return EvalRecord(checkpoint_uri=ckpt, env="countdown", split="test", seed=seed, k=2, engine="hf", n_tasks=2,
                      success_rate=success, pass_at_k=pass_k, reward_mean=success, run=run, step=step)


@pytest.fixture
def registry(tmp_path):
    """Two runs: GRPO metrics over 3 steps (r2: 2), and evaluations of their checkpoints over 2 seeds."""
    reg = open_registry(f"sqlite:///{tmp_path}/r.db", tmp_path)
    r1, r2 = reg.ensure_run("r1", recipe={}), reg.ensure_run("r2", recipe={})
    reg.log_metrics_many(r1, stage="grpo", records=[(s, {"reward_mean": 0.1 * s, "loss": 1.0 / s}) for s in (1, 2, 3)])
    reg.log_metrics_many(r2, stage="grpo", records=[(s, {"reward_mean": 0.2 * s}) for s in (1, 2)])
    reg.log_metrics(r1, stage="sft", step=1, metrics={"loss": 2.0})
    for rec in (ev("/r1/10", "r1", 10, 0, 0.0, 0.5), ev("/r1/10", "r1", 10, 1, 0.5, 1.0),
                ev("/r1/20", "r1", 20, 0, 1.0, 1.0), ev("/r1/20", "r1", 20, 1, 0.5, 0.5),
                ev("/r2/10", "r2", 10, 0, 0.25, 0.25), ev("/loose", None, None, 0, 1.0, 1.0)):
        reg.add_eval(rec)
    yield reg
    reg.close()


def test_series_group_by_metric_and_run(registry):
    train = training_series([m for run in ("r1", "r2") for m in registry.metrics(run=run)])
    assert sorted(train) == ["grpo/loss", "grpo/reward_mean", "sft/loss"]
    assert train["grpo/reward_mean"]["r2"] == [(1.0, pytest.approx(0.2)), (2.0, pytest.approx(0.4))]
    assert train["grpo/loss"] == {"r1": [(1.0, 1.0), (2.0, 0.5), (3.0, pytest.approx(1 / 3))]}
    evals = eval_series(registry.evals())  # the run-less "/loose" checkpoint has no step: left out
    assert sorted(evals) == ["eval/countdown/pass@2", "eval/countdown/success_rate"]
    # r1 step 10: success (0 + 0.5) / 2, pass@2 (0.5 + 1) / 2; step 20: 0.75, 0.75
    assert sorted(evals["eval/countdown/success_rate"]["r1"]) == [(10.0, 0.25), (20.0, 0.75)]
    assert sorted(evals["eval/countdown/pass@2"]["r1"]) == [(10.0, 0.75), (20.0, 0.75)]
    assert evals["eval/countdown/success_rate"]["r2"] == [(10.0, 0.25)]


def test_plot_registry_writes_one_valid_png_per_metric(registry, tmp_path):
    paths = plot_registry(registry, ["r1", "r2"], tmp_path / "plots")
    assert [p.name for p in paths] == ["eval__countdown__pass@2.png", "eval__countdown__success_rate.png",
                                       "grpo__loss.png", "grpo__reward_mean.png", "sft__loss.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
        height, width, _ = matplotlib.image.imread(path).shape
        assert (width, height) == (640, 400)  # 6.4 x 4.0 inches at 100 dpi
    only = plot_registry(registry, ["r2"], tmp_path / "r2", names=["reward_mean"])
    assert [p.name for p in only] == ["eval__countdown__pass@2.png", "eval__countdown__success_rate.png",
                                      "grpo__reward_mean.png"]


def test_lines_are_labelled_by_run_with_readable_axes():
    fig, ax = plt.subplots()
    draw_lines(ax, {"r1": [(2, 0.5), (1, 0.25)], "r2": [(1, float("nan")), (2, 1.0)]}, title="grpo/reward_mean",
               xlabel="training step", ylabel="reward_mean")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["r1", "r2"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("grpo/reward_mean", "training step", "reward_mean")
    first, second = ax.get_lines()
    assert list(first.get_xdata()) == [1, 2] and list(second.get_xdata()) == [2]  # sorted; NaN dropped
    plt.close(fig)


def test_the_run_report_still_draws_its_curves(tmp_path):
    stage = tmp_path / "grpo"
    stage.mkdir()
    (stage / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": s / 4, "success_rate": s / 8})
                                                 + "\n" for s in (1, 2)))
    summary = {"success_rate": 0.5, "mean_reward": 0.5, "mean_steps": 1.0, "pass_at_k": {"1": 0.5}, "n_tasks": 2}
    report = write_report(tmp_path / "run", {"grpo": summary}, {"grpo": stage})
    assert report.plot is not None and Path(report.plot).read_bytes()[:8] == PNG_MAGIC
    assert report.rows[0]["model"] == "grpo" and report.rows[0]["pass@1"] == 0.5


def test_the_report_states_the_training_trend_and_the_validation_change(tmp_path):
    from agentrl_core.evaluation.report import trend_lines, with_trailing_mean

    rows = [{"step": s, "reward_mean": r} for s, r in enumerate([0.2, 0.6, 0.4, 0.8, 0.6, 1.0, 0.8, 1.0], start=1)]
    smoothed = with_trailing_mean(rows, "reward_mean", 3)
    assert [round(r["reward_mean (3-step mean)"], 4) for r in smoothed] == [0.2, 0.4, 0.4, 0.6, 0.6, 0.8, 0.8, 0.9333]
    rows[0]["val/success_rate"], rows[-1]["val/success_rate"] = 0.5, 0.75
    assert trend_lines(rows) == [
        "training reward, mean of the first and last 2 of 8 steps: 0.400 → 0.900",
        "validation success (held-out, greedy), first and last check: 50.0% (logged at step 1) → 75.0% (step 8)"]
    assert trend_lines(rows[:3]) == []  # too few steps to speak of a trend
    stage = tmp_path / "grpo"
    stage.mkdir()
    (stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"success_rate": 0.5, "mean_reward": 0.5, "mean_steps": 1.0, "pass_at_k": {"1": 0.5}, "n_tasks": 2}
    write_report(tmp_path / "run", {"grpo": summary}, {"grpo": stage})
    text = (tmp_path / "run" / "report" / "summary.md").read_text()
    assert "## GRPO training" in text and "0.400 → 0.900" in text
