"""Household: dynamics on a hand-made scene, text, the expert's optimality, generated tasks."""

from __future__ import annotations

import pytest

from agentrl_core.envs.household import Goal, Household, Receptacle, Scene, State, normalize
from agentrl_core.envs.household.expert import search
from agentrl_core.envs.household.generate import Difficulty, make_scene
from agentrl_core.envs.household.world import CLEAN, COLD, HOT, MIDDLE
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

CABINET, COUNTERTOP, FRIDGE, MICROWAVE, SHELF, SINK = range(6)
APPLE, MUG1, MUG2 = range(3)


def make_scene_by_hand(where: tuple[int, int, int] = (COUNTERTOP, CABINET, FRIDGE), goal: Goal | None = None) -> Scene:
    """One kitchen: apple 1, mug 1, mug 2 placed by `where`; default goal: a clean mug on shelf 1."""
    kinds = ["cabinet", "countertop", "fridge", "microwave", "shelf", "sinkbasin"]
    receptacles = tuple(Receptacle(f"{k} 1", k, 0) for k in kinds)
    objects = (("apple 1", "apple"), ("mug 1", "mug"), ("mug 2", "mug"))
    start = State(0, MIDDLE, 0, where, (0, 0, 0))
    return Scene(("kitchen",), receptacles, objects, start, goal or Goal("mug", SHELF, "clean"), "clean")


def play(env: Household, *actions: str) -> str:
    obs = ""
    for action in actions:
        obs = env.step(action).observation
    return obs


def actions_line(obs: str) -> list[str]:
    line = obs.splitlines()[-1]
    assert line.startswith("Actions: ")
    return line.removeprefix("Actions: ").split(" | ")


@pytest.fixture()
def env() -> Household:
    env = Household(max_steps=30)
    env.load_scene(make_scene_by_hand())
    return env


def test_first_observation(env: Household) -> None:
    obs, info = env.load_scene(make_scene_by_hand())
    lines = obs.splitlines()
    assert lines[0] == (
        "You are in the middle of the kitchen. "
        "You see cabinet 1, countertop 1, fridge 1, microwave 1, shelf 1, sinkbasin 1."
    )
    assert lines[1] == "Your task: put a clean mug on shelf 1."
    assert actions_line(obs) == sorted(actions_line(obs)) == info["admissible_actions"]
    assert "go to cabinet 1" in info["admissible_actions"] and "look" in info["admissible_actions"]
    assert info["goal"] == "put a clean mug on shelf 1" and info["won"] is False


def test_hidden_objects_show_only_when_open(env: Household) -> None:
    obs = play(env, "go to cabinet 1")
    assert obs.splitlines()[0] == "You arrive at cabinet 1. It is closed."
    assert "mug 1" not in obs
    obs = play(env, "open cabinet 1")
    assert obs.splitlines()[0] == "You open cabinet 1. In it you see mug 1."
    assert "take mug 1 from cabinet 1" in actions_line(obs)
    obs = play(env, "close cabinet 1", "look")
    assert obs.startswith("You are at cabinet 1 in the kitchen. It is closed.")
    assert "take mug 1 from cabinet 1" not in actions_line(obs)


def test_visible_surface_contents(env: Household) -> None:
    obs = play(env, "go to countertop 1")
    assert obs.splitlines()[0] == "You arrive at countertop 1. On it you see apple 1."
    assert "open countertop 1" not in actions_line(obs)  # surfaces do not open


def test_must_be_there_to_open_or_take(env: Household) -> None:
    for action in ("open cabinet 1", "take apple 1 from countertop 1", "clean apple 1 with sinkbasin 1"):
        result = env.step(action)
        assert result.observation.splitlines()[0] == "Nothing happens."
        assert result.reward == 0.0 and not result.terminated
    assert env.state.at == MIDDLE


def test_take_put_and_carry_one(env: Household) -> None:
    obs = play(env, "go to countertop 1", "take apple 1 from countertop 1")
    assert obs.splitlines()[0] == "You take apple 1 from countertop 1."
    obs = play(env, "go to cabinet 1", "open cabinet 1")
    assert not [a for a in actions_line(obs) if a.startswith("take")]  # hands are full
    assert play(env, "inventory").startswith("You carry apple 1.")
    # apples do not go in cabinets; a countertop takes them ("on" a surface)
    assert "put apple 1 in cabinet 1" not in actions_line(obs)
    obs = play(env, "go to countertop 1", "put apple 1 on countertop 1")
    assert obs.splitlines()[0] == "You put apple 1 on countertop 1."
    assert play(env, "inventory").startswith("You carry nothing.")


def test_put_in_a_container_and_preposition_aliases(env: Household) -> None:
    play(env, "go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1")
    obs = play(env, "go to microwave 1", "open microwave 1")
    assert "put mug 1 in microwave 1" in actions_line(obs)
    # ALFWorld 0.3 says "in/on"; the wrong preposition is forgiven too
    assert play(env, "put mug 1 in/on microwave 1").startswith("You put mug 1 in microwave 1.")
    play(env, "take mug 1 from microwave 1")
    assert play(env, "put mug 1 on microwave 1").startswith("You put mug 1 in microwave 1.")


def test_clean_heat_cool(env: Household) -> None:
    play(env, "go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1")
    assert play(env, "clean apple 1 with sinkbasin 1").startswith("You clean apple 1 with sinkbasin 1.")
    play(env, "go to microwave 1", "heat apple 1 with microwave 1")
    assert env.state.flags[APPLE] == CLEAN | HOT
    assert play(env, "inventory").startswith("You carry apple 1 (clean, hot).")
    play(env, "go to fridge 1", "cool apple 1 with fridge 1")
    assert env.state.flags[APPLE] == CLEAN | COLD  # cooling undoes heating


def test_appliances_need_the_object_and_the_place(env: Household) -> None:
    obs = play(env, "go to sinkbasin 1")
    assert not [a for a in actions_line(obs) if a.startswith("clean")]  # carrying nothing
    play(env, "go to countertop 1", "take apple 1 from countertop 1")
    assert play(env, "heat apple 1 with microwave 1").startswith("Nothing happens.")  # not there


def test_goal_gives_reward_and_ends(env: Household) -> None:
    steps = [
        "go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to shelf 1", "put mug 1 on shelf 1",
    ]
    results = [env.step(a) for a in steps]
    assert all(r.reward == 0.0 and not r.terminated for r in results)  # the mug is not clean yet
    results = [env.step(a) for a in ("take mug 1 from shelf 1", "go to sinkbasin 1", "clean mug 1 with sinkbasin 1", "go to shelf 1")]
    last = env.step("put mug 1 on shelf 1")
    assert last.observation.splitlines()[0] == "You put mug 1 on shelf 1. Task complete!"
    assert (last.reward, last.terminated, last.truncated) == (1.0, True, False)
    assert last.info["success"] is True and last.info["won"] is True
    with pytest.raises(ResetNeededError):
        env.step("look")


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("  Go To Cabinet 1.  ", "go to cabinet 1"),
        ("\n\ngo   to\tcabinet 1\nbecause it may hold a mug", "go to cabinet 1"),
        ("Action: open cabinet 1", "open cabinet 1"),
        ("Action:\nopen cabinet 1", "open cabinet 1"),
        ("> look", "look"),
        ("put mug 1 in/on shelf 1", "put mug 1 in shelf 1"),
        ("", ""),
    ],
)
def test_normalize(reply: str, command: str) -> None:
    assert normalize(reply) == command


def test_reply_variants_are_accepted(env: Household) -> None:
    assert env.step("  Go to Cabinet 1.\nI will open it next.").observation.startswith("You arrive at cabinet 1.")


def test_nonsense_and_truncation() -> None:
    env = Household(max_steps=4)
    env.load_scene(make_scene_by_hand())
    results = [env.step(a) for a in ("asdf qwerty", "", "fly to the moon", "go to cabinet 9")]
    for r in results:
        assert r.observation.splitlines()[0] == "Nothing happens."
        assert r.observation.splitlines()[1].startswith("Actions: ")
        assert r.reward == 0.0 and not r.terminated
    assert [r.truncated for r in results] == [False, False, False, True]
    assert results[-1].info["success"] is False


def test_invalid_action_penalty_costs_the_turn_not_the_success() -> None:
    env = Household(max_steps=30, invalid_action_penalty=0.1)
    env.load_scene(make_scene_by_hand(goal=Goal("mug", SHELF)))
    bad = env.step("go to countertop 9")
    assert bad.observation.startswith("Nothing happens.") and bad.info["invalid_action"] is True
    assert bad.reward == pytest.approx(-0.1)
    ok = [env.step(a) for a in ("go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to shelf 1")]
    assert [r.reward for r in ok] == [0.0] * 4 and not any(r.info["invalid_action"] for r in ok)
    again = env.step("go to shelf 1")  # standing there already: not admissible
    assert again.reward == pytest.approx(-0.1) and again.info["invalid_action"] is True
    last = env.step("put mug 1 on shelf 1")
    assert (last.reward, last.info["success"], last.info["invalid_action"]) == (1.0, True, False)


def test_invalid_action_penalty_is_off_by_default_and_checked(env: Household) -> None:
    result = env.step("fly to the moon")
    assert result.reward == 0.0 and result.info["invalid_action"] is True
    for bad in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="invalid_action_penalty must be a finite number >= 0"):
            Household(invalid_action_penalty=bad)


def test_remind_task_restates_the_goal_every_turn_and_changes_nothing_else() -> None:
    plain, reminded = Household(max_steps=30), Household(max_steps=30, remind_task=True)
    goal = Goal("mug", SHELF)
    first = [e.load_scene(make_scene_by_hand(goal=goal))[0] for e in (plain, reminded)]
    assert first[0] == first[1] and first[0].count("Your task: put a mug on shelf 1.") == 1
    for action in ("go to cabinet 1", "fly to the moon", "look", "open cabinet 1", "take mug 1 from cabinet 1",
                   "go to shelf 1", "put mug 1 on shelf 1"):
        a, b = plain.step(action), reminded.step(action)
        head, actions = b.observation.rsplit("\nActions: ", 1)
        assert head.count("Your task: put a mug on shelf 1.") == 1, head  # once, also after "look"
        assert a.observation.endswith(actions) and (a.reward, a.terminated, a.info) == (b.reward, b.terminated, b.info)
    assert b.info["success"] is True and head.endswith("Your task: put a mug on shelf 1. Task complete!")
    with pytest.raises(ValueError, match="remind_task must be true or false"):
        Household(remind_task="false")


def test_expert_is_optimal_on_a_hand_made_scene() -> None:
    # mug 2 sits on the countertop in plain sight: cheaper than the one in the closed cabinet
    scene = make_scene_by_hand(where=(FRIDGE, CABINET, COUNTERTOP))
    env = Household()
    env.load_scene(scene)
    played = []
    while True:
        action = env.expert_action()
        played.append(action)
        result = env.step(action)
        if result.terminated or result.truncated:
            break
    assert played == [
        "go to countertop 1", "take mug 2 from countertop 1", "go to sinkbasin 1",
        "clean mug 2 with sinkbasin 1", "go to shelf 1", "put mug 2 on shelf 1",
    ]
    assert result.info["success"] is True
    full = search(scene, scene.start, prune=False)
    assert full is not None and len(full) == len(played)  # no shorter plan exists


def test_expert_finds_hidden_objects_and_recovers_from_detours() -> None:
    env = Household(max_steps=30)
    env.load_scene(make_scene_by_hand())  # both mugs hidden (cabinet, fridge)
    assert len(search(env.scene, env.state) or []) == 7
    play(env, "go to microwave 1", "open microwave 1", "go to countertop 1", "take apple 1 from countertop 1")
    for _ in range(12):
        result = env.step(env.expert_action())
        if result.terminated:
            break
    assert result.info["success"] is True


def test_pruned_search_matches_full_search_on_generated_scenes() -> None:
    for task_id in range(0, 3000, 100):
        scene, length = make_scene(task_id, Difficulty())
        full = search(scene, scene.start, prune=False)
        assert full is not None and len(full) == length


def test_generated_tasks_are_solved_by_the_expert_within_max_steps() -> None:
    env = Household()
    for task_id in list(range(0, 10_000, 125)) + list(range(10_000, 10_500, 10)):
        obs, info = env.reset(task_id=task_id)
        assert "Your task: put " in obs and info["won"] is False
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.terminated or result.truncated:
                break
        assert result.terminated and result.info["success"], (task_id, result.observation)


def test_generation_covers_task_types_and_rooms() -> None:
    scenes = [make_scene(t, Difficulty())[0] for t in range(300)]
    assert {s.task_type for s in scenes} == {"put", "clean", "heat", "cool"}
    two_rooms = sum(len(s.rooms) == 2 for s in scenes)
    assert 0 < two_rooms < 150  # one room most of the time
    for s in scenes:
        assert all(3 <= len(room) <= 6 for room in s.by_room)
        assert 2 <= len(s.objects) <= 5


def test_two_rooms() -> None:
    env = Household(two_room_prob=1.0)
    obs, info = env.reset(task_id=1)
    assert "A door leads to the living room." in obs or "A door leads to the kitchen." in obs
    other = "go to living room" if "go to living room" in info["admissible_actions"] else "go to kitchen"
    obs = env.step(other).observation
    assert obs.startswith("You are in the middle of the ")


def test_reset_is_deterministic_and_splits_are_disjoint() -> None:
    a, b = Household(), Household()
    assert a.reset(task_id=42) == b.reset(task_id=42)
    assert not set(a.task_ids("train")) & set(a.task_ids("test"))
    with pytest.raises(TaskNotFoundError):
        a.reset(task_id=10_500)
    with pytest.raises(ValueError, match="task_types"):
        Household(task_types=("juggle",))


def test_observations_stay_short() -> None:
    env = Household()
    words = []
    for task_id in range(40):
        obs, _ = env.reset(task_id=task_id)
        words.append(len(obs.split()))
        while True:
            result = env.step(env.expert_action())
            words.append(len(result.observation.split()))
            if result.terminated or result.truncated:
                break
    assert sum(words) / len(words) < 60


@pytest.mark.parametrize("kwargs", [{}, {"max_steps": 8, "two_room_prob": 0.0, "max_receptacles": 4, "max_objects": 3}])
def test_no_test_scene_is_a_training_scene(kwargs: dict) -> None:
    from agentrl_core.envs.household.generate import TEST_IDS, scene_key
    from agentrl_core.envs.partition import content_part

    diff = Household(**kwargs).difficulty
    train = {scene_key(make_scene(i, diff)[0]) for i in range(2000)}
    test = [scene_key(make_scene(i, diff)[0]) for i in TEST_IDS[:200]]
    assert not train & set(test)
    assert {content_part(k) for k in test} == {"test"} and {content_part(k) for k in train} == {"train"}
    assert len(set(test)) > 150  # the test part is not a handful of scenes played over and over


def test_content_part_is_stable_and_rejects_a_bad_share() -> None:
    from agentrl_core.envs.partition import content_part

    keys = [("kitchen", i) for i in range(4000)]
    parts = [content_part(k) for k in keys]
    assert parts == [content_part(k) for k in keys] and 350 < parts.count("test") < 650  # about 1 in 8
    assert content_part(("kitchen", 0)) == "train" and content_part(("kitchen", 8)) == content_part(("kitchen", 8))
    with pytest.raises(ValueError, match="share must be >= 2"):
        content_part("x", share=1)
