"""Content overlap of test tasks with training: counted per level, from the envs' own generators."""

from __future__ import annotations

import pytest

from agentrl_core.evaluation.overlap import content_keys, overlap, recipe_overlap


def test_overlap_counts_test_tasks_whose_key_training_has() -> None:
    table = {0: ("a", "x"), 1: ("b", "y"), 2: ("a", "z"), 3: ("c", "y"), 4: ("c", "w")}

    def keys(task_id: int) -> dict:
        kind, scene = table[task_id]
        return {"kind": kind, "scene": scene}

    rows = {r.level: r for r in overlap(keys, train_ids=[0, 1], test_ids=[2, 3, 4])}
    assert (rows["kind"].shared, rows["kind"].n_test, rows["kind"].distinct_train_keys) == (1, 3, 2)  # only "a"
    assert rows["scene"].shared == 1 and rows["scene"].share == pytest.approx(1 / 3)  # only "y"


def test_math_test_problems_share_no_arithmetic_fact_with_training() -> None:
    keys = content_keys("math", {"max_ops": 1, "max_stated": 20, "max_count": 100})
    rows = {r.level: r for r in overlap(keys, range(5000), range(5000, 5200))}
    assert rows["arithmetic"].shared == rows["story"].shared == 0 and rows["arithmetic"].n_test == 200
    assert rows["arithmetic"].distinct_train_keys > 300  # the training facts are many, not a handful


def test_math_facts_are_unordered_for_commutative_operations() -> None:
    from agentrl_core.envs.math_word import fact_key

    assert fact_key("19 + 10 = 29") == fact_key("10 + 19 = 29") == ("+", 10, 19)
    assert fact_key("3 * 7 = 21") == fact_key("7 * 3 = 21")
    assert fact_key("19 - 10 = 9") != fact_key("10 - 19 = -9") and fact_key("20 / 4 = 5") == ("/", 20, 4)


def test_a_recipe_reports_every_level_and_finer_levels_share_less() -> None:
    rows = {r.level: r for r in recipe_overlap("household_grpo", ["env.test_tasks=50", "env.train_tasks=300"])}
    assert set(rows) == {"goal", "scene", "scene with goal"} and all(r.n_test == 50 for r in rows.values())
    assert rows["scene with goal"].shared == rows["scene"].shared == 0 < rows["goal"].shared  # scenes: held out
    with pytest.raises(ValueError, match="no content check for env 'countdown'"):
        content_keys("countdown", {})


def test_generated_alfworld_test_games_share_no_scene_with_training() -> None:
    for module in ("alfworld", "textworld", "fast_downward"):
        pytest.importorskip(module)
    rows = {r.level: r for r in recipe_overlap("alfworld_grpo", ["env.test_tasks=12", "env.train_tasks=96"])}
    assert set(rows) == {"goal", "scene", "scene with goal"} and rows["scene"].n_test == 12
    assert rows["scene"].shared == rows["scene with goal"].shared == 0
    assert rows["scene"].distinct_train_keys == 96  # every training game its own scene
    assert rows["goal"].shared > 0  # the same kind of goal in a new scene is fair, and it does recur
