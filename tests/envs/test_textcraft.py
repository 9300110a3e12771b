"""TextCraft: recipe JSON, the crafting rules and messages, the generator's controls, the expert, folders."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentrl_core.envs import check_env, env_class, make
from agentrl_core.envs.textcraft import (
    TEST_IDS,
    TRAIN_IDS,
    Book,
    Crafter,
    Difficulty,
    Recipe,
    Task,
    TextCraft,
    command_of,
    load_recipe_folder,
    plan,
    recipe_from_json,
    recipe_to_json,
    save_recipe_folder,
    synthetic_task,
)
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

LOG, PLANK, STICK, TORCH, COAL = (f"mc:{n}" for n in ("oak_log", "oak_plank", "stick", "torch", "coal"))
BOOK = Book((
    Recipe.make(PLANK, 4, [(LOG, 1)]),
    Recipe.make(STICK, 4, [(PLANK, 2)]),
    Recipe.make(TORCH, 4, [(STICK, 1), (COAL, 1)]),
))


def _env_on(book: Book, goal: str, max_steps: int = 40) -> TextCraft:
    """An env playing a hand-made book (so every message and count is known)."""
    env = TextCraft(max_steps=max_steps)
    env.reset(task_id=0)
    env._task = Task(goal, book, book.recipes, int(book.depth[goal]), 0)
    env._crafter = Crafter(book)
    return env


def _play_expert(env: TextCraft, task_id: int) -> tuple[float, int]:
    env.reset(task_id=task_id)
    for steps in range(1, env.max_steps + 1):
        result = env.step(env.expert_action())
        if result.terminated or result.truncated:
            return result.reward, steps
    raise AssertionError("the episode did not end")


# -- contract ---------------------------------------------------------------------------------------
def test_registered_and_conforms() -> None:
    assert env_class("textcraft") is TextCraft
    check_env(make("textcraft"), tasks_per_split=5)
    check_env(TextCraft(min_depth=4, max_depth=4, max_ingredients=4, max_distractors=10, branch_prob=1.0))


def test_splits_are_disjoint_ranges() -> None:
    env = TextCraft()
    assert env.task_ids("train") == range(0, 10_000) and env.task_ids("test") == range(10_000, 10_500)
    assert not set(TRAIN_IDS) & set(TEST_IDS)


@pytest.mark.parametrize("task_id", [-1, 10_500, 10**9])
def test_unknown_task(task_id: int) -> None:
    with pytest.raises(TaskNotFoundError, match=r"\[0, 10000\)"):
        TextCraft().reset(task_id=task_id)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_depth": 5}, "max_depth <= 4"),
        ({"min_depth": 3, "max_depth": 2}, "min_depth <= max_depth"),
        ({"min_ingredients": 0}, "min_ingredients"),
        ({"max_output_count": 0}, "max_output_count"),
        ({"min_distractors": 3, "max_distractors": 1}, "distractors"),
        ({"max_steps": 10, "max_depth": 4, "max_ingredients": 3}, "max_steps >= 13"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TextCraft(**kwargs)


def test_expert_before_reset() -> None:
    with pytest.raises(ResetNeededError):
        TextCraft().expert_action()


# -- observations and rules ------------------------------------------------------------------------
def test_first_observation_layout() -> None:
    env = TextCraft()
    obs, info = env.reset(task_id=7)
    task = env.task
    head, goal_line = obs.split("\n\n")
    assert head.splitlines()[0] == "Crafting commands:"
    assert head.splitlines()[1:] == [r.command for r in task.shown]
    assert goal_line == f"Goal: craft {info['goal']}." and info["goal"] == task.goal.split(":")[1].replace("_", " ")
    assert "textcraft:" not in obs and "_" not in obs


def test_recipe_command_text() -> None:
    recipe = Recipe.make(TORCH, 4, [(COAL, 1), (STICK, 1)])
    assert recipe.command == "craft 4 torch using 1 coal, 1 stick"
    assert Recipe.make(PLANK, 1, [(LOG, 1), (LOG, 2)]).inputs == ((LOG, 3),)  # repeats merge
    with pytest.raises(ValueError):
        Recipe.make(PLANK, 0, [(LOG, 1)])


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("get 1 oak log", "get 1 oak log"),
        ("  Get  1   Oak Log.  ", "get 1 oak log"),
        ("Thought: I need logs.\nAction: get 1 oak log", "get 1 oak log"),
        ("> inventory", "inventory"),
        ("\n\ncraft 4 torch using 1 stick, 1 coal\nmore text", "craft 4 torch using 1 stick, 1 coal"),
        ("", ""),
    ],
)
def test_command_of(reply: str, command: str) -> None:
    assert command_of(reply) == command


def test_invalid_commands_explain_and_never_raise() -> None:
    env = _env_on(BOOK, TORCH)
    cases = [
        ("get 2 oak plank", "Could not find oak plank"),  # craftable items cannot be fetched
        ("get 1 unobtainium", "Could not find unobtainium"),
        ("get 0 oak log", "Could not get 0 oak log: the count must be between 1 and 1000"),
        ("craft 4 oak plank using 2 oak log", "Could not find enough items to craft oak plank"),
        ("craft 4 oak plank using 3 stick", "Could not find a valid recipe for oak plank"),
        ("craft 4 oak log using 1 oak plank", "Could not find a valid recipe for oak log"),
        ("craft 4 gold using 1 oak log", "Could not find gold"),
        ("craft 4 oak plank using 1 mystery", "Could not find mystery"),
        ("craft 4 oak plank using oak log", "Wrong item format: oak log. Write each ingredient as '<count> <item>'."),
        ("dance", "Could not execute dance. Use get, craft or inventory."),
        ("", "Could not execute (empty reply). Use get, craft or inventory."),
        ("inventory", "Inventory: You are not carrying anything."),
        ("get 1 " + "x" * 100_000, "Could not execute a command of 100006 characters (at most 1000). Use get, craft "
                                   "or inventory."),  # found by tests/envs/test_actions_fuzz.py: no 100 kB echo
    ]
    for action, message in cases:
        result = env.step(action)
        assert result.observation == message, action
        assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
        assert result.info["valid"] is False and result.info["success"] is False
    assert env._crafter.inventory == Counter()


def test_crafting_counts_batches_and_reward() -> None:
    env = _env_on(BOOK, TORCH)
    assert env.step("get 2 Oak_Log").observation == "Got 2 oak log"
    assert env.step("get 1 coal").observation == "Got 1 coal"
    assert env.step("inventory").observation == "Inventory: [coal] (1) [oak log] (2)"
    # two batches at once: 2 logs -> 2 * 4 planks (the stated output count is informational)
    assert env.step("craft 1 oak plank using 2 oak log").observation == "Crafted 8 oak plank"
    assert env.step("craft 3 oak plank using 3 oak log").observation == "Could not find enough items to craft oak plank"
    assert env.step("craft 4 stick using 3 oak plank").observation == "Could not find a valid recipe for stick"
    assert env.step("craft 4 stick using 2 oak plank").observation == "Crafted 4 stick"
    assert env._crafter.inventory == Counter({STICK: 4, PLANK: 6, COAL: 1})
    result = env.step("Action: craft 4 torch using 1 coal, 1 stick")
    assert result.observation == "Crafted 4 torch"
    assert (result.reward, result.terminated, result.truncated) == (1.0, True, False)
    assert result.info == {"success": True, "steps": 8, "valid": True}
    with pytest.raises(ResetNeededError):
        env.step("inventory")


def test_truncated_at_max_steps() -> None:
    env = TextCraft(max_steps=3, max_depth=1, max_ingredients=1)
    env.reset(task_id=1)
    assert [env.step("inventory").truncated for _ in range(2)] == [False, False]
    last = env.step("inventory")
    assert (last.reward, last.terminated, last.truncated, last.info["success"]) == (0.0, False, True, False)


# -- the expert -------------------------------------------------------------------------------------
def test_expert_plan_is_bottom_up() -> None:
    assert plan(BOOK, TORCH, Counter()) == [  # inputs in recipe order (sorted by id: coal, stick)
        "get 1 coal",
        "get 1 oak log",
        "craft 4 oak plank using 1 oak log",
        "craft 4 stick using 2 oak plank",
        "craft 4 torch using 1 coal, 1 stick",
    ]
    assert plan(BOOK, STICK, Counter(), amount=9) == [  # ceil(9/4) = 3 batches of sticks need 6 planks
        "get 2 oak log", "craft 8 oak plank using 2 oak log", "craft 12 stick using 6 oak plank",
    ]
    assert plan(BOOK, TORCH, Counter({STICK: 1, COAL: 5})) == ["craft 4 torch using 1 coal, 1 stick"]
    assert plan(BOOK, TORCH, Counter({TORCH: 1})) == []


def test_expert_sets_aside_shared_inputs() -> None:
    gem, dust, ring = "x:a_gem", "x:dust", "x:ring"  # the gem sorts first, so it is secured first
    book = Book((Recipe.make(ring, 1, [(dust, 2), (gem, 1)]), Recipe.make(dust, 1, [(gem, 3)])))
    # the 1 gem held is set aside for the ring; the dust then needs 6 more gems (2 batches x 3)
    commands = plan(book, ring, Counter({gem: 1}))
    assert commands == ["get 6 a gem", "craft 2 dust using 6 a gem", "craft 1 ring using 1 a gem, 2 dust"]
    crafter = Crafter(book, Counter({gem: 1}))
    assert [crafter.run(c).changed for c in commands] == [True, True, True]
    assert crafter.inventory == Counter({ring: 1})


def test_expert_with_cycles_in_the_book() -> None:
    a, b, c = "x:a", "x:b", "x:c"
    book = Book((Recipe.make(a, 1, [(b, 1)]), Recipe.make(b, 1, [(a, 1)]), Recipe.make(b, 2, [(c, 1)])))
    assert book.depth == {a: 2, b: 1, c: 0}
    assert plan(book, a, Counter()) == ["get 1 c", "craft 2 b using 1 c", "craft 1 a using 1 b"]
    cyclic_only = Book((Recipe.make(a, 1, [(b, 1)]), Recipe.make(b, 1, [(a, 1)])))
    with pytest.raises(ValueError, match="cannot be obtained"):
        plan(cyclic_only, a, Counter())


def test_expert_recovers_after_detours() -> None:
    env = TextCraft()
    for task_id in range(40):
        env.reset(task_id=task_id)
        base = sorted(i for i in env.task.book.items if not env.task.book.is_craftable(i))
        env.step(f"get 3 {base[0].split(':')[1]}")  # a side trip: maybe useful, maybe not
        env.step("craft 1 nothing using 1 thing")
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.terminated or result.truncated:
                break
        assert result.reward == 1.0, task_id


# -- the generator ----------------------------------------------------------------------------------
SAMPLE = list(range(300)) + list(range(10_000, 10_100))


def test_tasks_are_deterministic() -> None:
    d = Difficulty()
    for task_id in SAMPLE[::20]:
        assert synthetic_task(task_id, d) == synthetic_task.__wrapped__(task_id, d)
    first = TextCraft().reset(task_id=5)
    assert TextCraft().reset(task_id=5, seed=123) == first
    assert TextCraft().reset(task_id=6)[0] != first[0]


def test_generated_tasks_follow_the_controls_and_are_solvable() -> None:
    d = Difficulty()
    env = TextCraft()
    depths = Counter()
    for task_id in SAMPLE:
        task = synthetic_task(task_id, d)
        assert task.book.depth[task.goal] == task.depth and d.min_depth <= task.depth <= d.max_depth
        assert d.min_distractors <= task.num_distractors <= d.max_distractors
        assert len(task.shown) == len({r.output for r in task.shown})  # one recipe per item
        assert all(task.goal not in dict(r.inputs) for r in task.shown)  # the goal is no one's input
        for recipe in task.shown:  # tree and distractor recipes alike
            assert 1 <= len(recipe.inputs) <= d.max_ingredients and 1 <= recipe.count <= d.max_output_count
            assert all(1 <= n <= d.max_ingredient_count for _, n in recipe.inputs)
        assert len(task.expert_plan()) <= d.max_steps
        depths[task.depth] += 1
        if task_id % 4 == 0:
            reward, steps = _play_expert(env, task_id)
            assert reward == 1.0 and steps == len(task.expert_plan())
    assert set(depths) == {1, 2, 3, 4}


def _tree_of(task: Task) -> set[str]:
    """Craftable items under the goal."""
    seen, stack = set(), [task.goal]
    while stack:
        item = stack.pop()
        if item in seen or not task.book.is_craftable(item):
            continue
        seen.add(item)
        stack.extend(i for r in task.book.by_output[item] for i, _ in r.inputs)
    return seen


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_depth_and_ingredient_controls(depth: int) -> None:
    d = Difficulty(min_depth=depth, max_depth=depth, min_ingredients=2, max_ingredients=2, max_distractors=2)
    for task_id in range(60):
        task = synthetic_task(task_id, d)
        assert task.depth == depth == task.book.depth[task.goal]
        for item in _tree_of(task):
            (recipe,) = task.book.by_output[item]
            assert len(recipe.inputs) == 2


def test_distractor_controls() -> None:
    none = Difficulty(min_distractors=0, max_distractors=0)
    five = Difficulty(min_distractors=5, max_distractors=5)
    for task_id in range(50):
        plain = synthetic_task(task_id, none)
        assert plain.num_distractors == 0 and {r.output for r in plain.shown} == _tree_of(plain)
        busy = synthetic_task(task_id, five)
        distractors = [r for r in busy.shown if r.output not in _tree_of(busy)]
        assert len(distractors) == busy.num_distractors == 5
        tree_items = {i for r in busy.shown if r.output in _tree_of(busy) for i, _ in r.inputs}
        assert all(set(dict(r.inputs)) & tree_items for r in distractors)  # they use the tree's items


def test_output_and_count_controls() -> None:
    d = Difficulty(max_output_count=1, max_ingredient_count=1)
    for task_id in range(50):
        task = synthetic_task(task_id, d)
        for item in _tree_of(task):
            (recipe,) = task.book.by_output[item]
            assert recipe.count == 1 and {n for _, n in recipe.inputs} == {1}


# -- recipe JSON and folders ------------------------------------------------------------------------
def test_json_round_trip_shaped_and_shapeless() -> None:
    recipe = Recipe.make(TORCH, 4, [(STICK, 2), (COAL, 3)])
    shapeless = recipe_to_json(recipe)
    assert shapeless["type"] == "minecraft:crafting_shapeless" and len(shapeless["ingredients"]) == 5
    shaped = recipe_to_json(recipe, shaped=True)
    assert shaped == {
        "type": "minecraft:crafting_shaped", "pattern": ["AAA", "BB"],
        "key": {"A": {"item": COAL}, "B": {"item": STICK}}, "result": {"item": TORCH, "count": 4},
    }
    assert recipe_from_json(shapeless) == recipe_from_json(shaped) == recipe
    big = Recipe.make(TORCH, 1, [(STICK, 8), (COAL, 2)])  # 10 items do not fit a 3x3 grid
    assert recipe_to_json(big, shaped=True)["type"] == "minecraft:crafting_shapeless"


def test_json_variants_of_the_schema() -> None:
    newer = {"type": "minecraft:crafting_shapeless", "ingredients": ["mc:coal", ["mc:stick", "mc:bone"], "#mc:logs"],
             "result": {"id": "mc:torch"}}
    assert recipe_from_json(newer) == Recipe.make(TORCH, 1, [(COAL, 1), (STICK, 1), ("mc:logs", 1)])
    shaped = {"type": "minecraft:crafting_shaped", "pattern": ["# ", "#X"], "key": {"#": {"tag": "mc:planks"},
              "X": [{"item": "mc:coal"}], "Y": {"item": "mc:unused"}}, "result": "mc:thing"}
    assert recipe_from_json(shaped) == Recipe.make("mc:thing", 1, [("mc:planks", 2), (COAL, 1)])
    assert recipe_from_json({"type": "minecraft:smelting", "ingredient": {"item": LOG}, "result": COAL}) is None
    with pytest.raises(ValueError, match="f.json: 'result'"):
        no_id = {"type": "minecraft:crafting_shapeless", "ingredients": [COAL], "result": {"count": 2}}
        recipe_from_json(no_id, "f.json")
    with pytest.raises(ValueError, match="ingredient"):
        recipe_from_json({"type": "minecraft:crafting_shapeless", "ingredients": [{"x": 1}], "result": COAL})


def test_folder_loading(tmp_path: Path) -> None:
    recipes = [r for t in range(30) for r in synthetic_task(t, Difficulty()).shown]
    save_recipe_folder(recipes, tmp_path)
    (tmp_path / "smelt.json").write_text(json.dumps({"type": "minecraft:smelting", "result": COAL}))
    loaded = load_recipe_folder(tmp_path)
    assert sorted(loaded, key=repr) == sorted(recipes, key=repr)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        load_recipe_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_recipe_folder(tmp_path / "missing")


def test_env_on_a_recipe_folder(tmp_path: Path) -> None:
    save_recipe_folder([r for t in range(40) for r in synthetic_task(t, Difficulty()).shown], tmp_path)
    env = TextCraft(recipe_dir=str(tmp_path), max_distractors=4)
    train, test = env._goals
    assert train and test and not set(train) & set(test)
    check_env(env, tasks_per_split=4)
    goals = set()
    for task_id in [0, 1, 2, 3, 10_000, 10_001]:
        reward, _ = _play_expert(env, task_id)
        assert reward == 1.0
        goals.add(env.task.goal)
        assert (env.task.goal in test) == (task_id >= 10_000)
    assert len(goals) == 6
    with pytest.raises(FileNotFoundError):
        TextCraft(recipe_dir=str(tmp_path / "nope"))
