"""Intervals and paired comparisons: hand-computed values, symmetry, and coverage by simulation."""

from __future__ import annotations

import random

import pytest

from agentrl_core.evaluation.metrics import EpisodeResult, summarize
from agentrl_core.evaluation.stats import compare, mcnemar_exact_p, t_quantile, wilson_interval


def test_wilson_interval_hand_values():
    # p = 0.5, n = 16: centre 0.5, half = 1.96/1.2401 * sqrt(0.25/16 + 3.8416/1024) = 0.2200
    assert wilson_interval(8, 16) == pytest.approx((0.2800, 0.7200), abs=1e-4)
    assert wilson_interval(0, 16) == pytest.approx((0.0, 0.1936), abs=1e-4)  # 0 of 16 is not "0%"
    assert wilson_interval(16, 16) == pytest.approx((0.8064, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_t_quantiles():
    for df, exact in [(4, 2.7764), (10, 2.2281), (30, 2.0423), (200, 1.9719)]:
        assert t_quantile(df) == pytest.approx(exact, abs=2e-3)


def test_mcnemar_exact():
    assert mcnemar_exact_p(3, 0) == pytest.approx(0.25)  # 2 * 0.5**3
    assert mcnemar_exact_p(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_exact_p(5, 5) == 1.0 and mcnemar_exact_p(0, 0) == 1.0


def test_one_task_out_of_sixteen_is_no_difference():
    sft = {t: 1.0 if t < 2 else 0.0 for t in range(16)}
    grpo = {t: 1.0 if t < 3 else 0.0 for t in range(16)}
    c = compare(grpo, sft, ("grpo", "sft"))
    assert c.diff == pytest.approx(1 / 16) and c.low < 0 < c.high
    assert c.verdict == "no difference shown" and c.a_only == 1 and c.b_only == 0
    assert "no difference shown" in c.text()


def test_a_clear_gain_is_named_and_the_comparison_is_antisymmetric():
    rng = random.Random(0)
    sft = {t: float(rng.random() < 0.2) for t in range(200)}
    grpo = {t: 1.0 if sft[t] or rng.random() < 0.3 else 0.0 for t in range(200)}
    up, down = compare(grpo, sft, ("grpo", "sft")), compare(sft, grpo, ("sft", "grpo"))
    assert up.low > 0 and up.verdict == "grpo > sft" and up.p_value < 1e-6
    assert down.verdict == "sft < grpo"
    assert (down.diff, down.low, down.high) == pytest.approx((-up.diff, -up.high, -up.low))


def test_only_shared_tasks_are_compared_and_none_is_an_error():
    c = compare({1: 1.0, 2: 0.0, 3: 1.0}, {2: 1.0, 3: 1.0, 4: 0.0})
    assert c.n == 2
    with pytest.raises(ValueError, match="same tasks"):
        compare({1: 1.0}, {2: 1.0})


def test_several_samples_per_task_use_a_paired_t_interval():
    a = {t: 0.75 for t in range(40)}
    b = {t: 0.25 if t % 2 else 0.5 for t in range(40)}
    c = compare(a, b)
    assert c.method == "paired t over tasks" and c.diff == pytest.approx(0.375)
    # d_t alternates 0.25 / 0.5: s = 0.1266, half = t_39 * s / sqrt(40)
    assert c.high - c.diff == pytest.approx(t_quantile(39) * 0.12660 / 40 ** 0.5, abs=1e-4)


def _table(both: int, a_only: int, b_only: int, neither: int) -> tuple[dict[int, float], dict[int, float]]:
    """Two models' per-task outcomes with the given paired 2x2 counts."""
    cells = [(1.0, 1.0)] * both + [(1.0, 0.0)] * a_only + [(0.0, 1.0)] * b_only + [(0.0, 0.0)] * neither
    return {t: x for t, (x, _) in enumerate(cells)}, {t: y for t, (_, y) in enumerate(cells)}


@pytest.mark.parametrize("counts,published", [
    # Altman, Machin, Bryant & Gardner, Statistics with Confidence (2000), p. 52 (Newcombe's method 10)
    ((14, 5, 0, 22), (0.1220, 0.0115, 0.2265)),
    # Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables (2017), ch. 8 (Cavo et al. 2012),
    # as contingencytables' tests print it
    ((59, 6, 16, 80), (-0.0621, -0.1186, -0.0046)),
])
def test_paired_newcombe_interval_matches_published_worked_examples(counts, published):
    a, b = _table(*counts)
    c = compare(a, b)
    assert c.method == "paired Newcombe"
    assert (c.diff, c.low, c.high) == pytest.approx(published, abs=6e-5)


def test_newcombe_phi_continuity_correction_branches():
    # ad - bc in [0, n/2] -> phi = 0: the interval is the unpaired square-and-add of the two Wilson intervals
    a, b = _table(3, 2, 1, 2)  # ad - bc = 6 - 2 = 4 = n/2
    c = compare(a, b)
    p1, p2 = 5 / 8, 4 / 8
    l1, u1 = wilson_interval(5, 8)
    l2, u2 = wilson_interval(4, 8)
    assert c.low == pytest.approx((p1 - p2) - ((p1 - l1) ** 2 + (u2 - p2) ** 2) ** 0.5)
    assert c.high == pytest.approx((p1 - p2) + ((u1 - p1) ** 2 + (p2 - l2) ** 2) ** 0.5)
    # ad - bc < 0 is used as it is (negative correlation widens the interval past the unpaired one)
    a, b = _table(1, 4, 4, 1)
    wide = compare(a, b)
    l, u = wilson_interval(5, 10)
    assert wide.high - wide.diff > ((u - 0.5) ** 2 + (0.5 - l) ** 2) ** 0.5


@pytest.mark.parametrize("n,p1,p2", [(30, 0.3, 0.3), (60, 0.2, 0.35), (200, 0.1, 0.15)])
def test_paired_interval_covers_the_true_difference_95_percent_of_the_time(n, p1, p2):
    rng = random.Random(n)
    hits, reps = 0, 1500
    for _ in range(reps):  # correlated pairs: b succeeds more often where a does
        a = [rng.random() < p1 for _ in range(n)]
        b = [rng.random() < (min(1.0, p2 + 0.3) if x else max(0.0, p2 - 0.3 * p1 / (1 - p1))) for x in a]
        c = compare(dict(enumerate(map(float, a))), dict(enumerate(map(float, b))))
        truth = p1 - (p1 * min(1.0, p2 + 0.3) + (1 - p1) * max(0.0, p2 - 0.3 * p1 / (1 - p1)))
        hits += c.low <= truth <= c.high
    assert 0.92 <= hits / reps <= 0.99


def test_summaries_carry_the_interval_and_per_task_rates():
    results = [EpisodeResult(t, 0, float(t < 4), t < 4, 3) for t in range(20)]
    s = summarize(results)
    assert s.success_rate == pytest.approx(0.2) and s.n_scored_tasks == 20
    assert (s.success_low, s.success_high) == pytest.approx(wilson_interval(4, 20))
    assert s.success_text() == "20.0% [8.1, 41.6] n=20"
    assert s.task_success[3] == 1.0 and s.task_success[4] == 0.0
    back = type(s).from_dict(s.to_dict())
    assert back == s


def test_a_best_validated_checkpoint_is_compared_with_its_stage_start() -> None:
    from agentrl_core.evaluation.report import comparisons

    def scored(wins: int) -> dict:
        return {"task_success": {t: float(t < wins) for t in range(40)}}

    evals = {"base": scored(0), "sft": scored(10), "grpo": scored(20), "grpo-best": scored(30)}
    names = [(c.a, c.b) for c in comparisons(evals)]
    assert names == [("sft", "base"), ("grpo", "sft"), ("grpo", "base"), ("grpo-best", "sft")]
    (best,) = [c for c in comparisons(evals) if c.a == "grpo-best"]
    assert best.diff == 0.5 and best.n == 40  # 30 of 40 against the SFT start's 10
    no_best = [(c.a, c.b) for c in comparisons({"base": scored(0), "sft-best": scored(5)})]
    assert no_best == []  # a best checkpoint of a first stage has no start scored: nothing to compare


def test_episode_metrics_are_summarised_with_intervals_and_compared_pair_by_pair(tmp_path) -> None:
    from agentrl_core.evaluation import EvalSummary, summary_rows, to_markdown
    from agentrl_core.evaluation.report import comparisons, eval_rows, markdown_table

    def run(formed: int, solved: int) -> dict:  # 40 tasks, 2 samples: the first `formed` tasks well-formed
        results = [EpisodeResult(t, j, 0.0, t < solved, 3, metrics={"well_formed": float(t < formed)})
                   for t in range(40) for j in range(2)]
        results.append(EpisodeResult(40, 0, 0.0, False, 1))  # an env that reported no metric for one task
        return summarize(results).to_dict()

    base, sft = run(0, 0), run(30, 2)
    m = sft["metrics"]["well_formed"]
    assert (m["mean"], m["n"]) == (30 / 40, 40)  # over the 80 episodes that report it, on 40 tasks
    assert (m["low"], m["high"]) == pytest.approx(wilson_interval(30, 40))
    back = EvalSummary.from_dict(sft)
    assert back.task_metrics["well_formed"][29] == 1.0 and back.to_dict() == sft
    assert summary_rows({"sft": back})[0]["well_formed"] == 0.75
    assert "well_formed [95% CI] n" in to_markdown({"sft": back}) and "75.0% [" in to_markdown({"sft": back})
    assert eval_rows({"sft": sft})[0]["well_formed [95% CI] n"].startswith("75.0% [")
    assert "| well_formed [95% CI] n |" in markdown_table(eval_rows({"base": base, "sft": sft}))
    success, formed = comparisons({"base": base, "sft": sft})
    assert (success.metric, formed.metric) == ("success", "well_formed")
    assert formed.diff == 0.75 and formed.n == 40 and formed.low > 0 and formed.a_only == 30
    assert formed.text().startswith("well_formed: sft − base: +75.0 points")
    no_metric = {k: v for k, v in base.items() if k not in ("metrics", "task_metrics")}  # an older eval.json
    assert [c.metric for c in comparisons({"base": no_metric, "sft": sft})] == ["success"]
