"""BabyAI as text: level/seed numbering, the view's sentences, the planner, actions, reward, the expert."""

from __future__ import annotations

import time

import pytest

from agentrl_core.envs.babyai.levels import (
    LEVELS,
    NUM_LEVELS,
    TEST_IDS,
    TRAIN_IDS,
    level_of,
)
from agentrl_core.envs.babyai.planner import (
    FORWARD,
    LEFT,
    PICKUP,
    RIGHT,
    TOGGLE,
    Reach,
)
from agentrl_core.envs.babyai.text import where
from agentrl_core.errors import TaskNotFoundError

# -- no minigrid needed -------------------------------------------------------------------------


def test_forty_levels_in_agentgym_order() -> None:
    ids = [lv.env_id for lv in LEVELS]
    assert NUM_LEVELS == 40 and len(set(ids)) == 40
    # AgentGym's all_levels is 1-based: 1 GoToRedBallGrey, 18 UnblockPickup, 28 BlockedUnlockPickup, 40 BossLevelNoUnlock
    assert ids[0] == "BabyAI-GoToRedBallGrey-v0"
    assert ids[17] == "BabyAI-UnblockPickup-v0"
    assert ids[27] == "BabyAI-BlockedUnlockPickup-v0"
    assert ids[39] == "BabyAI-BossLevelNoUnlock-v0"


@pytest.mark.parametrize(
    ("task_id", "env_id", "seed"),
    [
        (0, "BabyAI-GoToRedBallGrey-v0", 0),
        (41, "BabyAI-GoToRedBall-v0", 1),
        (40 * 7 + 39, "BabyAI-BossLevelNoUnlock-v0", 7),
        (40 * 999 + 21, "BabyAI-PutNextLocalS6N4-v0", 999),
        (40_000, "BabyAI-GoToRedBallGrey-v0", 1000),
        (40_999, "BabyAI-BossLevelNoUnlock-v0", 1024),
    ],
)
def test_task_id_is_level_and_seed(task_id: int, env_id: str, seed: int) -> None:
    level, level_seed = level_of(task_id)
    assert (level.env_id, level_seed) == (env_id, seed)


def test_splits_are_disjoint_seed_ranges() -> None:
    assert TRAIN_IDS == range(40_000) and TEST_IDS == range(40_000, 41_000)
    train_seeds = {level_of(t)[1] for t in (TRAIN_IDS[0], TRAIN_IDS[-1])}
    test_seeds = {level_of(t)[1] for t in (TEST_IDS[0], TEST_IDS[-1])}
    assert train_seeds == {0, 999} and test_seeds == {1000, 1024}
    for task_id in (-1, 41_000, 10**9):
        with pytest.raises(TaskNotFoundError, match=r"\[40000, 41000\)"):
            level_of(task_id)


def test_position_phrases() -> None:
    assert where(3, 0) == "right in front of you 3 steps away"
    assert where(1, 2) == "1 steps in front of you and 2 steps to your right"
    assert where(0, -3) == "0 steps in front of you and 3 steps to your left"


def _grid(rows: list[str]) -> tuple[int, int, list[int]]:
    """'.' passable, '#' blocked; returns (width, height, passable)."""
    return len(rows[0]), len(rows), [1 if ch == "." else 0 for row in rows for ch in row]


def test_planner_shortest_paths() -> None:
    w, h, passable = _grid(["....", ".#..", "...."])
    reach = Reach(w, h, passable, (0, 0), 0)  # at the top-left corner, facing east (+x)
    assert reach.path((0, 0), 0) == []
    assert reach.path((3, 0), 0) == [FORWARD, FORWARD, FORWARD]
    assert reach.path((0, 0), 2) in ([LEFT, LEFT], [RIGHT, RIGHT])
    # face (1, 1) (the wall cell): from (1, 0) facing south is 2 steps (forward, right)
    assert reach.path_to_face((1, 1)) == [FORWARD, RIGHT]
    # stand on (1, 2): around the wall, 4 steps (right, forward, forward, left, forward) = 5
    path = reach.path_to_stand((1, 2))
    assert path is not None and len(path) == 5 and path.count(FORWARD) == 3
    assert reach.path_to_stand((9, 9)) is None


def test_planner_unreachable() -> None:
    w, h, passable = _grid(["..#.", "..#.", "..#."])
    reach = Reach(w, h, passable, (0, 1), 0)
    assert reach.path_to_stand((3, 0)) is None
    assert reach.path_to_face((3, 1)) is None
    assert reach.path_to_face((2, 1)) == [FORWARD]


# -- with minigrid ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mg() -> object:
    pytest.importorskip("minigrid")
    from agentrl_core.envs import babyai

    return babyai


def test_registered_and_conforms(mg: object) -> None:
    from agentrl_core.envs import check_env, env_class, make
    from agentrl_core.envs.babyai import BabyAI

    assert env_class("babyai") is BabyAI and env_class("babyai-v1") is BabyAI
    check_env(make("babyai"))


def test_levels_match_minigrid_registrations(mg: object) -> None:
    import gymnasium
    import minigrid

    if "BabyAI-GoToRedBall-v0" not in gymnasium.registry:
        minigrid.register_minigrid_envs()  # gymnasium >= 1.0 no longer loads minigrid's entry point
    for level in LEVELS:
        spec = gymnasium.registry[level.env_id]
        assert spec.entry_point == f"minigrid.envs.babyai:{level.cls}", level
        assert dict(spec.kwargs) == level.kwargs, level


def test_reset_is_deterministic_and_seeded(mg: object) -> None:
    from agentrl_core.envs.babyai import BabyAI

    env = BabyAI()
    first = env.reset(task_id=38)
    env.step("turn left")
    assert env.reset(task_id=38) == first
    obs, info = first
    assert info["level"] == "BabyAI-BossLevel-v0" and info["seed"] == 0
    assert obs.startswith(f"Your goal: {info['mission']}\n")
    assert obs.endswith('"check available actions"]')
    assert env.reset(task_id=38 + 40)[0] != obs  # the next seed is another layout


def _hand_state(babyai: object) -> object:
    """A BabyAI env whose room we replace by a hand-built one (8x8, agent at (3, 6) facing north)."""
    from minigrid.core.grid import Grid
    from minigrid.core.world_object import Ball, Door, Key

    from agentrl_core.envs.babyai import BabyAI

    env = BabyAI()
    env.reset(task_id=2)  # GoToRedBallNoDists, seed 0: an 8x8 room
    m = env.minigrid
    grid = Grid(8, 8)
    grid.wall_rect(0, 0, 8, 8)
    grid.set(3, 3, Ball("red"))
    grid.set(5, 5, Key("blue"))
    grid.set(1, 0, Door("yellow", is_open=False))
    m.grid, m.agent_pos, m.agent_dir, m.carrying = grid, (3, 6), 3, None
    env._seen = bytearray(64)
    env._look(m.gen_obs()["image"])
    return env


def test_text_of_a_hand_built_view(mg: object) -> None:
    env = _hand_state(mg)
    # ball: 3 ahead (distance 3); key: 1 ahead, 2 right (distance 3, but nearer row in scan order -> after
    # the ball); door in the top wall: 6 ahead, 2 left (distance 8); wall straight ahead 6 steps.
    assert env._text() == (
        "In front of you in this room, you can see several objects: "
        "There is a red ball 1 right in front of you 3 steps away. "
        "There is a blue key 1 1 steps in front of you and 2 steps to your right. "
        "There is a yellow closed door 1 6 steps in front of you and 2 steps to your left. "
        "The room has walls around you. You are facing a wall 6 steps away. You are not carrying anything."
    )
    assert env.available == [
        "turn left", "turn right", "move forward", "pickup red ball 1", "pickup blue key 1",
        "toggle and go through yellow closed door 1", "go to red ball 1", "go to blue key 1",
        "go to yellow closed door 1", "check available actions",
    ]
    acts = env._actions
    assert acts["pickup red ball 1"] == [FORWARD, FORWARD, PICKUP]
    assert acts["go to blue key 1"] == [FORWARD, RIGHT, FORWARD]  # to (4, 5), facing east
    door = acts["toggle and go through yellow closed door 1"]
    assert len(door) == 11 and door[-2:] == [TOGGLE, FORWARD]  # 9 moves to face (1, 0) from (1, 1)


def test_macro_actions_run_their_primitives(mg: object) -> None:
    env = _hand_state(mg)
    result = env.step("pickup blue key 1")
    m = env.minigrid
    assert (m.carrying.type, m.carrying.color) == ("key", "blue")
    assert tuple(m.agent_pos) == (4, 5) and m.agent_dir == 0 and m.step_count == 4
    assert "You are carrying a blue key." in result.observation
    assert "drop" in env.available and not any(a.startswith("pickup") for a in env.available)
    env.step("drop")
    assert m.carrying is None and m.grid.get(5, 5).type == "key"
    assert "toggle and go through yellow closed door 1" not in env.available  # out of view (facing east)
    env.step("turn left")
    result = env.step("toggle and go through yellow closed door 1")
    assert tuple(m.agent_pos) == (1, 0) and m.grid.get(1, 0).is_open
    assert result.info["primitive_steps"] == m.step_count


def test_invalid_actions_are_observations(mg: object) -> None:
    from agentrl_core.envs.babyai import BabyAI

    env = BabyAI(max_steps=4)
    env.reset(task_id=0)
    before = env.minigrid.step_count
    r = env.step("asdf qwerty")
    assert r.observation.startswith("The action is not recognized.") and "Available actions: [" in r.observation
    assert (r.reward, r.terminated, r.truncated, r.info["action_valid"]) == (0.0, False, False, False)
    r = env.step("pickup purple ball 7")
    assert r.observation.startswith("You cannot pickup purple ball 7 now.")
    r = env.step("check available actions")
    assert r.observation.startswith("You can take the following actions: turn left, turn right")
    assert env.minigrid.step_count == before  # nothing ran
    r = env.step("")
    assert r.truncated and not r.terminated and r.info["success"] is False  # 4 steps = max_steps


def test_normalize() -> None:
    from agentrl_core.envs.babyai.env import normalize

    assert normalize("Action: Turn  Left.") == "turn left"
    assert normalize('\n  "go to red ball 1"\nbecause') == "go to red ball 1"
    assert normalize("> pickup blue key 1") == "pickup blue key 1"
    assert normalize("   ") == ""


def test_reward_formula() -> None:
    from agentrl_core.envs.babyai.env import step_reward

    assert step_reward(0, 64) == 1.0
    assert step_reward(10, 64) == pytest.approx(0.859375)  # 1 - 0.9 * 10 / 64
    assert step_reward(16, 16) == pytest.approx(0.1)


def _play_expert(env: object, task_id: int) -> object:
    env.reset(task_id=task_id)
    for _ in range(env.max_steps):
        result = env.step(env.expert_action())
        if result.terminated or result.truncated:
            return result
    raise AssertionError("the episode did not end")


def test_expert_reward_is_minigrids(mg: object) -> None:
    from agentrl_core.envs.babyai import BabyAI

    env = BabyAI()
    result = _play_expert(env, 2)  # GoToRedBallNoDists, seed 0
    m = env.minigrid
    assert result.terminated and result.info["success"] is True
    assert result.reward == pytest.approx(1 - 0.9 * result.info["primitive_steps"] / m.max_steps)
    assert m.max_steps == 64 and "The task is completed." in result.observation


def _unsolvable(mission: str, env_id: str) -> bool:
    """OpenDoorsOrderN4Debug's before/after missions: minigrid 2.3 checks the second strict
    clause on the very toggle that completes the first, which fails the episode."""
    return env_id == "BabyAI-OpenDoorsOrderN4Debug-v0" and ("after you" in mission or ", then" in mission)


def test_expert_wins_every_level(mg: object) -> None:
    from agentrl_core.envs.babyai import BabyAI

    env = BabyAI()
    lost = []
    for task_id in range(2 * NUM_LEVELS):
        _, info = env.reset(task_id=task_id)
        if _unsolvable(info["mission"], info["level"]):
            continue
        result = _play_expert(env, task_id)
        if not (result.terminated and result.info["success"] and result.reward > 0):
            lost.append((task_id, info["level"], info["mission"]))
    assert not lost, lost


def test_speed(mg: object) -> None:
    """Random available actions over mixed levels: well above 50 steps/s even on a busy CPU."""
    import random

    from agentrl_core.envs.babyai import BabyAI

    env, rng, steps = BabyAI(max_steps=30), random.Random(0), 0
    start = time.perf_counter()
    for task_id in range(0, 400, 7):
        env.reset(task_id=task_id)
        for _ in range(30):
            steps += 1
            r = env.step(rng.choice(env.available))
            if r.terminated or r.truncated:
                break
    assert steps / (time.perf_counter() - start) > 50
