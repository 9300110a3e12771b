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


def test_math_arithmetic_of_a_test_task_is_found_in_training() -> None:
    keys = content_keys("math", {"max_ops": 1, "max_stated": 20, "max_count": 100})
    test_id = 5000
    fact = keys(test_id)["arithmetic"]
    twin = next(t for t in range(5000) if keys(t)["arithmetic"] == fact)  # some training story teaches it
    assert keys(twin)["story"] != keys(test_id)["story"]
    (arith,) = [r for r in overlap(keys, [twin], [test_id]) if r.level == "arithmetic"]
    assert arith.shared == 1


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
