"""ALFWorld on its real engine: generated scenes, planner-checked games, the default set, the Env."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl_core.envs.alfworld import AlfWorld, Difficulty, draw_scene, normalize
from agentrl_core.envs.alfworld.catalog import (
    LAMP,
    RECEPTACLE_KINDS,
    TASK_RULES,
    TASK_TYPES,
    holds,
)
from agentrl_core.envs.alfworld.scene import LOOK, TWO, task_type_of
from agentrl_core.envs.task_reminder import alfworld_goal
from agentrl_core.errors import MissingExtraError, ResetNeededError, TaskNotFoundError

pytestmark = pytest.mark.slow  # a real engine, JVM, database, planner or training run: seconds each

ENGINE_MODULES = ("alfworld", "textworld", "fast_downward")


def _need_engine() -> None:
    for module in ENGINE_MODULES:
        pytest.importorskip(module)


@pytest.fixture(scope="module", autouse=True)
def agentrl_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private AGENTRL_HOME, so generated games are cached per test run, not in the user's cache."""
    home = tmp_path_factory.mktemp("agentrl_home")
    saved = {k: os.environ.get(k) for k in ("AGENTRL_HOME", "ALFWORLD_DATA")}
    os.environ["AGENTRL_HOME"] = str(home)
    os.environ.pop("ALFWORLD_DATA", None)
    yield home
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# -- without the engine: the scene generator -------------------------------------------------------
def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AlfWorld, "requires", ("agentrl_no_such_module",))
    with pytest.raises(MissingExtraError, match=r"pip install 'agentrl\[alfworld\]'"):
        AlfWorld()


def _scenes(n: int, difficulty: Difficulty | None = None) -> list:
    difficulty = difficulty or Difficulty()
    scenes = []
    for task_id in range(n):
        scene = draw_scene(random.Random(task_id), difficulty, task_type_of(task_id, difficulty))
        if scene is not None:
            scenes.append(scene)
    return scenes


def test_scenes_are_deterministic_and_cover_all_types() -> None:
    first, second = _scenes(120), _scenes(120)
    assert first == second
    assert len(first) >= 110  # a draw may fail; the dataset then takes the next sub-seed
    assert Counter(s.task_type for s in first).keys() == set(TASK_TYPES)
    assert [task_type_of(i, Difficulty()) for i in range(6)] == list(TASK_TYPES)


def test_scenes_respect_the_task_rules() -> None:
    for s in _scenes(300):
        rooms, _, appliance = TASK_RULES[s.task_type]
        kinds = [r.kind for r in s.receptacles]
        assert s.room in rooms
        goal_things = [t for t in s.things if t.kind == s.obj]
        assert len(goal_things) >= (2 if s.task_type == TWO else 1)
        for t in s.things:  # every object sits in a receptacle that can hold it
            assert holds(s.receptacles[t.place].kind, t.kind), (t, s.receptacles[t.place])
        if s.task_type == LOOK:
            assert s.recep is None and s.toggle == LAMP
            assert sum(t.kind == LAMP for t in s.things) == 1
        else:
            assert s.recep in kinds and s.recep != appliance and holds(s.recep, s.obj)
            assert all(s.receptacles[t.place].kind != s.recep for t in goal_things)  # the goal starts unmet
        if appliance:
            assert appliance in kinds
        for kind, count in Counter(kinds).items():
            assert count <= RECEPTACLE_KINDS[kind].max_count
        for r in s.receptacles:
            assert r.opened is False and r.openable == RECEPTACLE_KINDS[r.kind].openable  # closed_prob=1


def test_difficulty_knobs_change_the_scenes() -> None:
    small = Difficulty(min_receptacles=3, max_receptacles=4, min_distractors=0, max_distractors=0, max_goal_copies=1)
    big = Difficulty(min_receptacles=16, max_receptacles=20, min_distractors=15, max_distractors=20, closed_prob=0.0)
    small_scenes, big_scenes = _scenes(60, small), _scenes(60, big)
    assert max(len(s.receptacles) for s in small_scenes) <= 5  # required kinds may add one
    assert min(len(s.receptacles) for s in big_scenes) >= 12  # a small room may hold fewer kinds than asked
    assert all(len(s.things) <= 3 for s in small_scenes if s.task_type != TWO)
    assert all(r.opened == r.openable for s in big_scenes for r in s.receptacles)  # nothing starts closed
    only_heat = Difficulty(task_types=("pick_heat_then_place",))
    assert {s.task_type for s in _scenes(12, only_heat)} == {"pick_heat_then_place"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_receptacles": 2}, "min_receptacles"),
        ({"min_distractors": 5, "max_distractors": 4}, "min_distractors"),
        ({"max_goal_copies": 0}, "max_goal_copies"),
        ({"closed_prob": 1.5}, "closed_prob"),
        ({"task_types": ("pick_and_fly",)}, "task_types"),
    ],
)
def test_bad_difficulty(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Difficulty(**kwargs).validate()


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("go to cabinet 1", "go to cabinet 1"),
        ("Action: Go to  Cabinet 1.\nbecause", "go to cabinet 1"),
        ("> open fridge 1", "open fridge 1"),
        ("put apple 1 in/on countertop 1", "move apple 1 to countertop 1"),  # ALFWorld 0.3 / AgentGym
        ("put apple 1 on countertop 1", "move apple 1 to countertop 1"),
        ("\n\n  look  ", "look"),
        ("", ""),
    ],
)
def test_normalize(reply: str, command: str) -> None:
    assert normalize(reply) == command


# -- with the engine ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    _need_engine()
    from agentrl_core.envs.alfworld.gamefile import make_engine

    eng = make_engine(admissible=False)
    yield eng
    eng.close()


def test_registered_and_conforms() -> None:
    _need_engine()
    from agentrl_core.envs import check_env, env_class, make

    assert env_class("alfworld") is AlfWorld and env_class("alfworld-v1") is AlfWorld
    env = make("alfworld")
    assert env.task_ids("train") == range(2420) and env.task_ids("test") == range(2420, 2620)
    check_env(env)


def test_games_are_reproducible(engine) -> None:
    from agentrl_core.envs.alfworld import generate_game
    from agentrl_core.envs.alfworld.dataset import GeneratedGames, sha256

    for task_id in (7, 2425):
        a, b = generate_game(task_id, engine=engine), generate_game(task_id)  # shared and fresh engine
        assert a.data == b.data and a.plan == b.plan and a.sub_seed == b.sub_seed
        cached = GeneratedGames().path(task_id, engine)
        assert sha256(cached.read_bytes()) == sha256(a.data)
        game = json.loads(a.data)
        assert list(game) == ["pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"]
        assert game["solvable"] is True and "UNKNOWN GOAL" not in game["grammar"]
    assert generate_game(7, engine=engine).data != generate_game(7, seed=1, engine=engine).data
    # another interpreter with another hash seed makes the same bytes
    code = "from agentrl_core.envs.alfworld import generate_game as g; print(g(7).data.hex())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=os.environ | {"PYTHONHASHSEED": "12345"}, capture_output=True, text=True,
        timeout=120, check=True,
    )
    assert bytes.fromhex(out.stdout.strip()) == generate_game(7, engine=engine).data


def test_test_games_are_drawn_from_the_test_part_of_the_scene_space(engine) -> None:
    from agentrl_core.envs.alfworld import dataset
    from agentrl_core.envs.alfworld.scene import scene_key
    from agentrl_core.envs.partition import content_part

    games, drawn = dataset.GeneratedGames(), {}
    for task_id in (*range(6), *range(2420, 2426)):  # every task type, in each split
        game = drawn[task_id] = dataset.generate_game(task_id, engine=engine)
        assert content_part(scene_key(game.scene)) == dataset.split_of(task_id)
        assert games.scene(task_id, engine) == game.scene  # the cached game's sub-seed draws its scene again
    # 7 draws in 8 fall in the train part: test ids skip some sub-seeds that train ids would have taken
    assert any(drawn[task_id].sub_seed > 0 for task_id in range(2420, 2426))


def test_unsolvable_draws_take_the_next_sub_seed(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl_core.envs.alfworld import dataset

    calls: list[int] = []
    real_plan = dataset.plan

    def plan_fails_twice(eng):
        calls.append(1)
        return [] if len(calls) <= 2 else real_plan(eng)

    monkeypatch.setattr(dataset, "plan", plan_fails_twice)
    game = dataset.generate_game(11, engine=engine)
    assert game.sub_seed >= 2 and game.plan  # sub-seeds 0 and 1 were "unsolvable"
    monkeypatch.setattr(dataset, "plan", lambda eng: [])
    with pytest.raises(RuntimeError, match="sub-seeds"):
        dataset.generate_game(11, engine=engine)


def test_hundred_games_are_planned_and_won_on_replay(engine) -> None:
    """Acceptance: >= 100 games over all six types are solved by the planner and won on replay."""
    from agentrl_core.envs.alfworld import generate_game
    from agentrl_core.envs.alfworld.gamefile import goal_met

    ids = list(range(0, 2620, 25))  # 105 ids, train and test; 25 and 6 are coprime: all six types
    types: Counter[str] = Counter()
    start = time.perf_counter()
    for task_id in ids:
        game = generate_game(task_id, engine=engine)
        types[game.scene.task_type] += 1
        assert engine.unwrapped._game_data == json.loads(game.data)  # the engine holds the file's game
        state = engine.reset()
        assert not state["won"]
        for k, command in enumerate(game.plan):
            assert command in state["_valid_commands"], (task_id, command)
            state, score, done = engine.step(command)
            assert done == (k == len(game.plan) - 1), (task_id, k, command)
        assert state["won"] and score == 1 and goal_met(engine)
    assert len(ids) >= 100 and set(types) == set(TASK_TYPES) and min(types.values()) >= 15
    print(f"\n{len(ids)} games generated, planned and replayed in {time.perf_counter() - start:.1f} s")


def test_the_memoized_parses_keep_the_engines_text() -> None:
    """TextWorld's parses memoized (parse_cache): every observation and admissible list as without, 6 task types."""
    _need_engine()
    import textworld.envs.pddl.textgen as textgen

    from bench.bench_alfworld_engine import timed

    ids = list(range(0, 150, 25))  # 0, 25, ..., 125: the six task types
    _, plain = timed(False, ids)
    _, memoized = timed(True, ids)
    assert memoized == plain and len(plain) > 6 * 5
    assert textgen._parse_and_convert.cache_info().hits > 0  # installed again, and answering from its cache


def test_a_reused_worker_plays_a_task_exactly_as_a_new_one() -> None:
    """The env server keeps ALFWorld's worker for the next session (reuse_worker): that session plays the same task
    with the expert to the same transcript as the first one did in its new process."""
    _need_engine()
    from fastapi.testclient import TestClient

    from agentrl_core.env_service.server import create_app

    def play(client: TestClient) -> tuple[int, list[str]]:
        created = client.post("/sessions", json={"env": "alfworld", "task_id": 5}).json()
        sid, seen = created["session_id"], [created["observation"]]
        for _ in range(40):
            action = client.get(f"/sessions/{sid}/expert").json()["action"]
            step = client.post(f"/sessions/{sid}/step", json={"action": action}).json()
            seen.append(step["observation"])
            if step["terminated"] or step["truncated"]:
                break
        reused = client.get("/metrics").json()["sessions_on_reused_workers"]
        assert client.delete(f"/sessions/{sid}").status_code == 204
        return reused, seen

    with TestClient(create_app(["alfworld"], workers=1)) as client:
        (reused_before, first), (reused_after, second) = play(client), play(client)
    assert (reused_before, reused_after) == (0, 1) and second == first and len(first) > 2


def test_episode_rewards_observations_and_invalid_actions() -> None:
    _need_engine()
    env = AlfWorld()
    obs, info = env.reset(task_id=3)
    assert "Your task is to: " in obs and "\nActions: " in obs
    assert "go to countertop 1" in info["available_actions"] and info["won"] is False
    bad = env.step("fly to the moon")
    assert bad.observation.startswith("Nothing happens.")
    assert (bad.reward, bad.terminated, bad.truncated, bad.info["invalid_action"]) == (0.0, False, False, True)
    assert bad.info["available_actions"] == info["available_actions"]  # the state did not change
    rewards = []
    for _ in range(env.max_steps):
        result = env.step(env.expert_action())
        rewards.append(result.reward)
        if result.terminated:
            break
    # reward = 1.0 on the step that wins, 0.0 on every other step
    assert rewards == [0.0] * (len(rewards) - 1) + [1.0]
    assert result.info["success"] is True and result.info["won"] is True
    with pytest.raises(ResetNeededError):
        env.step("look")
    plain = AlfWorld(list_actions=False)
    obs, info = plain.reset(task_id=3)
    assert "Actions:" not in obs and info["available_actions"]


def test_invalid_action_penalty() -> None:
    _need_engine()
    env = AlfWorld(invalid_action_penalty=0.1)
    env.reset(task_id=3)
    bad = env.step("fly to the moon")
    assert bad.reward == pytest.approx(-0.1) and bad.info["invalid_action"] is True
    good = env.step(env.expert_action())
    assert good.reward in (0.0, 1.0) and good.info["invalid_action"] is False
    with pytest.raises(ValueError, match="invalid_action_penalty"):
        AlfWorld(invalid_action_penalty=-1)


def test_remind_task_restates_the_first_observations_goal() -> None:
    _need_engine()
    env = AlfWorld(remind_task=True)
    first, _ = env.reset(task_id=3)
    goal = alfworld_goal(first)
    assert goal and not goal.endswith(".")
    for action in ("fly to the moon", env.expert_action()):
        head = env.step(action).observation.split("\nActions: ")[0]
        assert head.endswith(f" Your task: {goal}."), head
    with pytest.raises(ValueError, match="no 'Your task is to:' line"):
        alfworld_goal("You are in the middle of a room.")


def test_here_listing_says_the_commands_that_never_change_once() -> None:
    _need_engine()
    full, here = AlfWorld(), AlfWorld(list_actions="here")
    obs_full, _ = full.reset(task_id=3)
    obs, info = here.reset(task_id=3)
    assert obs == obs_full and "go to countertop 1" in obs  # the first turn lists every command
    assert "'go to'" in here.system_prompt and full.system_prompt == AlfWorld.system_prompt
    for _ in range(3):
        action = full.expert_action()
        got_full, got = full.step(action), here.step(action)
        assert got.info["available_actions"] == got_full.info["available_actions"]  # every command, as before
        listed = got.observation.split("\nActions here: ")[1].split(" | ")
        local = [a for a in got.info["available_actions"]
                 if not a.startswith("go to ") and a not in ("help", "inventory", "look")]
        assert listed == (local or ["(none)"])
        assert got.observation.split("\n")[0] == got_full.observation.split("\n")[0]
    assert len(got.observation) < len(got_full.observation)
    with pytest.raises(ValueError, match="list_actions must be one of all, here, none"):
        AlfWorld(list_actions="some")


def test_agentgym_put_wording_wins() -> None:
    """AgentGym's ALFWorld 0.3 says "put X in/on Y" where 0.4 says "move X to Y"; both work."""
    _need_engine()
    env = AlfWorld()
    env.reset(task_id=5)  # pick_two_obj_and_place: two puts
    puts = 0
    for _ in range(env.max_steps):
        action = env.expert_action()
        if action.startswith("move "):
            obj, target = action[len("move "):].split(" to ")
            action, puts = f"put {obj} in/on {target}", puts + 1
        result = env.step(action)
        if result.terminated:
            break
    assert puts == 2 and result.reward == 1.0 and result.info["success"] is True


def test_truncation_at_max_steps() -> None:
    _need_engine()
    env = AlfWorld(max_steps=3)
    env.reset(task_id=0)
    results = [env.step("asdf") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].info["success"] is False and results[-1].terminated is False
    with pytest.raises(ValueError, match="max_steps"):
        AlfWorld(max_steps=0)


@pytest.mark.parametrize("task_id", [-1, 2620, 10**9])
def test_unknown_task(task_id: int) -> None:
    _need_engine()
    with pytest.raises(TaskNotFoundError, match=r"\[0, 2420\)"):
        AlfWorld().reset(task_id=task_id)


def test_default_set_layout_and_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _need_engine()
    from agentrl_core.envs.alfworld import build_default_set
    from agentrl_core.envs.alfworld.dataset import sha256

    ids = [0, 1, 2, 2420, 2421]
    first = json.loads(build_default_set(tmp_path / "a", ids=ids).read_text())
    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path / "home2"))  # an empty cache: generate again, in workers
    second = json.loads(build_default_set(tmp_path / "b", ids=list(reversed(ids)), workers=2).read_text())
    assert first == second  # same ids -> the same games, whatever the order, worker count or process
    assert first["engine"] == {"alfworld": "0.4.2", "textworld": "1.7.0"}
    assert [g["task_id"] for g in first["games"]] == ids
    for entry in first["games"]:
        path = tmp_path / "a" / entry["path"]
        assert path.name == "game.tw-pddl" and sha256(path.read_bytes()) == entry["sha256"]
        folder = "train" if entry["task_id"] < 2420 else "valid_train"
        assert entry["path"].startswith(f"json_2.1.1/{folder}/{entry['task_type']}-")
        traj = json.loads(path.with_name("traj_data.json").read_text())
        assert traj["task_type"] == entry["task_type"] and traj["agentrl"]["task_id"] == entry["task_id"]


def test_official_layout_is_played(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake `json_2.1.1` made of generated games: ids over sorted paths, named extra splits."""
    _need_engine()
    from agentrl_core.envs import check_env
    from agentrl_core.envs.alfworld import build_default_set

    build_default_set(tmp_path, ids=[0, 1, 2, 3, 2420, 2421])
    root = tmp_path / "json_2.1.1"
    train = sorted((root / "train").rglob("game.tw-pddl"))
    for split, source in (("valid_seen", train[0]), ("valid_unseen", train[1])):
        shutil.copytree(source.parent.parent, root / split / source.parent.parent.name)
    shutil.copytree(train[2].parent.parent, root / "train" / "pick_and_place_with_movable_recep-X-Y-Z-1")
    env = AlfWorld(data_dir=str(tmp_path))
    assert env.splits == {
        "train": range(4), "test": range(2420, 2422), "valid_seen": range(2620, 2621),
        "valid_unseen": range(2621, 2622),
    }  # the "movable" copy is skipped, as ALFWorld's loader does
    obs, info = env.reset(task_id=1)
    assert info["gamefile"] == str(train[1]) and "Your task is to: " in obs
    _, info = env.reset(task_id=2620)
    assert info["gamefile"].startswith(str(root / "valid_seen"))
    with pytest.raises(TaskNotFoundError, match="valid_unseen"):
        env.reset(task_id=4)
    check_env(AlfWorld(data_dir=str(tmp_path)), tasks_per_split=2)  # a fresh env, as check_env asks
    monkeypatch.setenv("ALFWORLD_DATA", str(root))  # json_2.1.1 itself works too
    assert AlfWorld().splits == env.splits
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="ALFWORLD_DATA"):
        AlfWorld()
    with pytest.raises(ValueError, match="holds no ALFWorld data"):
        AlfWorld(data_dir=str(tmp_path / "nowhere"))
