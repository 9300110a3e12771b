"""Evaluation metrics: pass@k against hand-computed values, summaries, and rendered tables."""

from __future__ import annotations

import json
from math import comb

import pytest

from agentrl_core.evaluation import (
    EpisodeResult,
    EvalSummary,
    pass_at_k,
    render_table,
    summarize,
    summary_rows,
    to_markdown,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (10, 3, 1, 0.3),  # pass@1 is the success fraction
        (5, 0, 3, 0.0),
        (4, 3, 2, 1.0),  # n - c = 1 < k: every pair holds a success
        (3, 3, 3, 1.0),
        (1000, 1, 10, 0.01),  # C(999,10)/C(1000,10) = 990/1000, no overflow
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_the_binomial_formula():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 1, 0), (3, 4, 1), (3, -1, 1)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _episodes() -> list[EpisodeResult]:
    """3 tasks x 4 samples; task 1 has one infrastructure error."""
    rows = [
        (0, [(1.0, True, 3), (0.0, False, 5), (0.1, False, 5), (0.0, False, 5)]),
        (1, [(1.0, True, 2), (1.0, True, 4), (0.0, False, 6), None]),
        (2, [(0.0, False, 10)] * 4),
    ]
    out = []
    for task, samples in rows:
        for sample, spec in enumerate(samples):
            if spec is None:
                out.append(EpisodeResult(task, sample, 0.0, False, 0, error="env server 503"))
            else:
                out.append(EpisodeResult(task, sample, *spec))
    return out


def test_summarize_hand_computed_and_errors_excluded():
    s = summarize(_episodes())
    assert (s.n_tasks, s.n_episodes, s.k, s.n_errors) == (3, 12, 4, 1)
    assert s.success_rate == pytest.approx(3 / 11)  # 3/12 would be scoring the error as a failure
    assert s.mean_reward == pytest.approx(3.1 / 11)
    assert s.mean_steps == pytest.approx(70 / 11)
    # pass@1 per task: 1/4, 2/3, 0.
    assert s.pass_at_k[1] == pytest.approx((1 / 4 + 2 / 3 + 0) / 3)
    # pass@4: task 0 -> 1.0 (n-c = 3 < 4), task 1 has only 3 scored samples (left out), task 2 -> 0.
    assert s.pass_at_k[4] == pytest.approx(0.5)
    assert s.pass_at_k_tasks == {1: 3, 4: 2}


def test_summarize_with_explicit_k_and_k_of_one():
    s = summarize(_episodes(), k=2)
    # pass@2: task 0: 1 - C(3,2)/C(4,2) = 0.5; task 1: 1 - C(1,2)/C(3,2) = 1.0; task 2: 0.
    assert s.pass_at_k[2] == pytest.approx(0.5)
    single = summarize([EpisodeResult(0, 0, 1.0, True, 1), EpisodeResult(1, 0, 0.0, False, 1)])
    assert single.k == 1 and single.pass_at_k == {1: 0.5}


def test_summarize_all_errors_gives_no_rates():
    s = summarize([EpisodeResult(0, j, 0.0, False, 0, error="timeout") for j in range(2)])
    assert (s.success_rate, s.mean_reward, s.mean_steps) == (None, None, None)
    assert s.pass_at_k == {1: None, 2: None} and s.n_errors == 2


def test_summarize_rejects_empty_and_duplicate_results():
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
    with pytest.raises(ValueError, match="duplicate result for task 0 sample 0"):
        summarize([EpisodeResult(0, 0, 1.0, True, 1)] * 2)


def test_to_dict_is_json_safe_and_round_trips():
    s = summarize(_episodes())
    data = json.loads(json.dumps(s.to_dict()))
    assert data["pass_at_k"]["4"] == pytest.approx(0.5) and data["n_errors"] == 1
    assert EvalSummary.from_dict(data) == s


def _two_models() -> dict[str, EvalSummary]:
    good = [EpisodeResult(t, j, 1.0, True, 2) for t in range(2) for j in range(4)]
    return {"base": summarize(_episodes()), "grpo": summarize(good)}


def test_summary_rows_are_json_safe():
    rows = summary_rows(_two_models())
    assert json.loads(json.dumps(rows)) == rows
    assert rows[0] == {
        "model": "base", "success_rate": 0.2727, "success_ci_low": 0.043, "success_ci_high": 0.7576,
        "n_scored_tasks": 3, "pass@1": 0.3056, "pass@k": 0.5, "k": 4,
        "mean_reward": 0.2818, "mean_steps": 6.36, "n_tasks": 3, "n_errors": 1,
    }
    assert rows[1]["success_rate"] == 1.0 and rows[1]["n_errors"] == 0


def test_render_table_aligns_columns():
    lines = render_table(_two_models()).splitlines()
    assert lines[0].split() == ["model", "success", "[95%", "CI]", "n", "pass@1", "pass@4", "mean", "reward", "mean",
                                "steps", "errors"]
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == ["base", "27.3%", "[4.3,", "75.8]", "n=3", "30.6%", "50.0%", "0.282", "6.4", "1"]
    assert lines[3].split() == ["grpo", "100.0%", "[34.2,", "100.0]", "n=2", "100.0%", "100.0%", "1.000", "2.0", "0"]
    assert len({len(line) for line in lines}) == 1  # every line padded to the same width


def test_to_markdown_table():
    md = to_markdown(_two_models()).splitlines()
    assert md[0] == "| model | success [95% CI] n | pass@1 | pass@4 | mean reward | mean steps | errors |"
    assert md[1] == "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    assert md[2] == "| base | 27.3% [4.3, 75.8] n=3 | 30.6% | 50.0% | 0.282 | 6.4 | 1 |"


def test_tables_mark_mixed_k_and_missing_values():
    rows = _two_models()
    rows["broken"] = summarize([EpisodeResult(0, 0, 0.0, False, 0, error="crash")])
    md = to_markdown(rows)
    assert "| model | success [95% CI] n | pass@1 | pass@k |" in md
    assert "50.0% (k=4)" in md
    assert "| broken | n/a | n/a | n/a (k=1) | n/a | n/a | 1 |" in md


def test_an_environment_that_counts_invalid_commands_gets_their_share_per_episode():
    from agentrl_core.evaluation.runner import episode_results
    from agentrl_core.rollout import Trajectory

    counted = Trajectory(task_id=1, env="household", group=0, sample=0, num_turns=4, success=True,
                         extra={"invalid_actions": 1, "episode_metrics": {"well_formed": 1.0}})
    silent = Trajectory(task_id=2, env="other", group=1, sample=0, num_turns=3)
    no_turn = Trajectory(task_id=3, env="household", group=2, sample=0, num_turns=0, extra={"invalid_actions": 0})
    results = episode_results([counted, silent, no_turn])
    assert [r.metrics for r in results] == [{"well_formed": 1.0, "invalid_action_rate": 0.25}, {}, {}]
    s = summarize(results)
    assert s.metrics["invalid_action_rate"]["mean"] == 0.25 and s.metrics["invalid_action_rate"]["n"] == 1
    assert s.task_metrics["invalid_action_rate"] == {1: 0.25}
