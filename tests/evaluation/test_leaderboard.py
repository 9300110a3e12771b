"""The leaderboard: records pooled over seeds (mean ± sample std), best first per env, as markdown."""

from __future__ import annotations

import math

import pytest

from agentrl_core.evaluation.leaderboard import leaderboard, to_markdown
from agentrl_core.store import EvalRecord, open_registry


def rec(ckpt: str, seed: int, success: float | None, pass_k: float | None, reward: float | None, *, env: str = "countdown",
        k: int = 2, run: str | None = "r1", step: int | None = None) -> EvalRecord:
    return EvalRecord(checkpoint_uri=ckpt, env=env, split="test", seed=seed, k=k, engine="hf", n_tasks=4,
                      success_rate=success, pass_at_k=pass_k, reward_mean=reward, run=run, step=step)


RECORDS = [
    rec("/ck/a", 0, 0.25, 0.5, 0.3, step=10), rec("/ck/a", 1, 0.75, 1.0, 0.8, step=10),
    rec("/ck/b", 0, 0.5, 0.5, 0.6, step=20), rec("/ck/b", 1, 0.5, 0.75, 0.5, step=20), rec("/ck/b", 2, 0.5, 0.75, 0.4, step=20),
    rec("/ck/c", 0, None, None, None, step=30),  # every episode errored
    rec("/ck/a", 0, 1.0, 1.0, 1.0, env="alfworld", step=10),
]


def test_rows_pool_seeds_with_mean_and_sample_std():
    rows = {(r["checkpoint"], r["env"]): r for r in leaderboard(RECORDS)}
    a = rows[("/ck/a", "countdown")]
    # success 0.25, 0.75: mean 0.5, s = sqrt((0.25² + 0.25²) / 1) = 0.353553…
    assert a["success_mean"] == pytest.approx(0.5) and a["success_std"] == pytest.approx(math.sqrt(0.125))
    assert a["pass_at_k"] == pytest.approx(0.75) and a["reward_mean"] == pytest.approx(0.55)
    assert (a["n_seeds"], a["seeds"], a["n_tasks"], a["run"], a["step"], a["k"]) == (2, [0, 1], 4, "r1", 10, 2)
    b = rows[("/ck/b", "countdown")]
    assert b["success_mean"] == pytest.approx(0.5) and b["success_std"] == pytest.approx(0.0)
    assert b["pass_at_k"] == pytest.approx(2 / 3) and b["reward_mean"] == pytest.approx(0.5)
    c = rows[("/ck/c", "countdown")]
    assert (c["success_mean"], c["success_std"], c["pass_at_k"], c["n_seeds"]) == (None, None, None, 1)
    single = rows[("/ck/a", "alfworld")]
    assert single["success_mean"] == 1.0 and single["success_std"] is None  # one seed: no spread


def test_rows_are_sorted_by_env_then_best_first():
    order = [(r["env"], r["checkpoint"]) for r in leaderboard(RECORDS)]
    # countdown: a and b tie on success 0.5; a wins on pass@k (0.75 > 0.667); c (no score) last
    assert order == [("alfworld", "/ck/a"), ("countdown", "/ck/a"), ("countdown", "/ck/b"), ("countdown", "/ck/c")]


def test_different_k_or_engine_are_separate_rows():
    rows = leaderboard([rec("/ck/a", 0, 0.5, 0.5, 0.5, k=1), rec("/ck/a", 0, 0.5, 0.75, 0.5, k=2)])
    assert [r["k"] for r in rows] == [2, 1]  # same success: the higher pass@k first


def test_markdown_table():
    text = to_markdown(leaderboard(RECORDS))
    lines = text.splitlines()
    assert lines[0] == "| checkpoint | run | step | env | success | 95% CI | pass@k | reward | n |"
    assert lines[1] == "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
    # 2 of 4 tasks: Wilson [15.0, 85.0]; 4 of 4: [51.0, 100.0] (the task is the unit, not the seed)
    assert lines[3] == ("| /ck/a | r1 | 10 | countdown | 50.0% ± 35.4 | [15.0, 85.0] | 75.0% (k=2) | 0.550 | "
                        "2 seeds × 4 tasks |")
    assert lines[2] == "| /ck/a | r1 | 10 | alfworld | 100.0% | [51.0, 100.0] | 100.0% (k=2) | 1.000 | 1 seed × 4 tasks |"
    assert lines[5] == "| /ck/c | r1 | 30 | countdown | n/a | n/a | n/a (k=2) | n/a | 1 seed × 4 tasks |"
    assert len(lines) == 2 + 4


def test_rows_from_the_registry_equal_rows_from_the_records(tmp_path):
    with open_registry(f"sqlite:///{tmp_path}/r.db", tmp_path) as reg:
        reg.ensure_run("r1", recipe={})
        for record in RECORDS:
            reg.add_eval(record)
        assert leaderboard(reg.evals()) == leaderboard(RECORDS)
        assert to_markdown(leaderboard(reg.evals(env="countdown"))).count("\n") == 1 + 3
