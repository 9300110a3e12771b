"""SciWorld: AgentGym's id mapping, splits, reward normalisation, the capped JVM and its limit, check_env."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from agentrl_core.envs import check_env, make
from agentrl_core.envs.registry import env_class
from agentrl_core.envs.sciworld import (
    AGENTGYM_SIZE,
    TASKS,
    TOTAL,
    JVMGoneError,
    JVMLimitError,
    SciWorld,
    java_options,
    jvm,
    locate,
    normalised_score,
    parse_action,
    split_ids,
    task_id_of,
)
from agentrl_core.errors import MissingExtraError, ResetNeededError, TaskNotFoundError

pytestmark = pytest.mark.slow  # a real engine, JVM, database, planner or training run: seconds each

FIND_ANIMAL_3 = 3839  # find-animal starts at 2936 (find-living-thing) + 3 * 300; variation 3 is in train


def _needs_engine() -> None:
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs a Java runtime on PATH")


@pytest.fixture(scope="module")
def env() -> Iterator[SciWorld]:
    """One env (one JVM) shared by the tests that only play episodes."""
    _needs_engine()
    e = SciWorld()
    yield e
    e.close()


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def _running(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- ids, splits, pure functions (no JVM) ---------------------------------------------------------
def test_import_is_light() -> None:
    code = "import sys, agentrl_core.envs.sciworld; print('scienceworld' in sys.modules or 'py4j' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("task_id", "name", "variation"),
    [
        (0, "boil", 0),
        (29, "boil", 29),
        (30, "melt", 0),  # 30 boil variations come first
        (120, "use-thermometer", 0),  # after the four 30-variation state-of-matter tasks
        (2936, "find-living-thing", 0),  # 120 + 540 + 436 + 300 + 20 + 20 + 900 + 600
        (FIND_ANIMAL_3, "find-animal", 3),
        (4136, "chemistry-mix", 0),  # 2936 + 4 * 300: grow-plant and grow-fruit (5-1, 5-2) are skipped
        (4638, "identify-life-stages-2", 9),  # AgentGym's last data_idx
        (4639, "grow-plant", 0),  # then the seven tasks AgentGym skips, in tasks.json order
        (4891, "inclined-plane-determine-angle", 0),  # 4639 + 126 + 126
        (7206, "mendelian-genetics-unknown-plant", 479),
    ],
)
def test_id_mapping_matches_agentgym(task_id: int, name: str, variation: int) -> None:
    task, var = locate(task_id)
    assert (task.name, var) == (name, variation)
    assert task_id_of(name, variation) == task_id


def test_id_space_sizes() -> None:
    assert (AGENTGYM_SIZE, TOTAL) == (4639, 7207)
    assert sum(t.variations for t in TASKS) == 7207 and len(TASKS) == 30
    for bad in (-1, TOTAL):
        with pytest.raises(TaskNotFoundError, match=r"\[0, 7207\)"):
            locate(bad)
    with pytest.raises(ValueError, match="variations"):
        task_id_of("boil", 30)


def test_splits_are_scienceworlds_and_disjoint() -> None:
    for task_set, size in (("agentgym", AGENTGYM_SIZE), ("all", TOTAL)):
        splits = split_ids(task_set)
        ids = [set(v) for v in splits.values()]
        assert sum(map(len, ids)) == len(set().union(*ids)) == size  # disjoint, covering the set
        assert all(list(v) == sorted(v) for v in splits.values())
    train, test = split_ids("agentgym")["train"], split_ids("agentgym")["test"]
    assert (len(train), len(test)) == (2312, 1171)
    assert train[:3] == (0, 1, 2) and 14 not in train and 14 not in test  # boil: train 0-13, dev 14-20
    assert test[:2] == (21, 22) and test[-1] == 4638
    assert all(locate(t)[0].split_of(locate(t)[1]) == "test" for t in test[::50])
    assert SciWorld.splits == split_ids("agentgym")


@pytest.mark.parametrize(("raw", "expected"), [(100, 1.0), (75, 0.75), (8, 0.08), (0, 0.0), (-1, 0.0), (-100, 0.0)])
def test_normalised_score(raw: int, expected: float) -> None:
    assert normalised_score(raw) == expected


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("open door to kitchen", "open door to kitchen"),
        ("  go to kitchen \n", "go to kitchen"),
        ("Thought:\nI should look.\n\nAction:\nlook around", "look around"),
        ("Thought: a\nAction: pick up x\nAction: focus on y\nmore text", "focus on y"),  # the last marker wins
        ("action: wait1", "wait1"),
        ("", ""),
        ("x" * 1000, "x" * 300),
    ],
)
def test_parse_action(reply: str, command: str) -> None:
    assert parse_action(reply) == command


def test_java_options() -> None:
    assert java_options(1024) == ["-Xmx1024m"]
    assert java_options(None) == []  # no cap: the JVM default (1/4 of RAM)
    assert java_options(512, ["-XX:+UseSerialGC"]) == ["-Xmx512m", "-XX:+UseSerialGC"]
    for bad in (0, 64, "1g"):
        with pytest.raises(ValueError, match="jvm_heap_mb"):
            java_options(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="java options"):
        java_options(512, ["Xmx1g"])


def test_construction_is_cheap_and_validated() -> None:
    _needs_engine()
    e = SciWorld(task_set="all")
    assert e.jvm_pid is None and len(e.task_ids("train")) == 3592  # no JVM until the first reset
    e.close()
    with pytest.raises(ValueError, match="task_set"):
        SciWorld(task_set="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps"):
        SciWorld(max_steps=0)


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SciWorld, "requires", ("scienceworld_not_installed_xyz",))
    with pytest.raises(MissingExtraError, match=r"agentrl\[sciworld\]"):
        SciWorld()


# -- episodes on the real engine --------------------------------------------------------------------
def test_registered_and_conforms() -> None:
    _needs_engine()
    assert env_class("sciworld") is SciWorld and SciWorld.max_sessions == 8
    check_env(make("sciworld"))


def test_reset_observation_and_info(env: SciWorld) -> None:
    obs, info = env.reset(task_id=FIND_ANIMAL_3)
    assert obs.startswith("Your task is to find a(n) animal.") and "This outside location is called" in obs
    assert info == {"task_id": FIND_ANIMAL_3, "task_name": "find-animal", "variation": 3, "split": "train",
                    "raw_score": 0, "score": 0.0, "moves": 0}  # "look around" takes no time
    assert env.reset(task_id=FIND_ANIMAL_3, seed=7) == (obs, info)  # deterministic; the seed is unused


def test_invalid_actions_are_observations(env: SciWorld) -> None:
    env.reset(task_id=FIND_ANIMAL_3)
    for action in ("asdf qwerty", "", "go to the moon", "Ω≈ç√", "x" * 5000):
        r = env.step(action)
        assert r.observation == "No known action matches that input."
        assert (r.reward, r.terminated, r.truncated, r.info["raw_score"]) == (0.0, False, False, 0)


def test_wrong_focus_fails_with_zero_reward(env: SciWorld) -> None:
    env.reset(task_id=FIND_ANIMAL_3)
    r = env.step("Thought: the agent is an animal.\nAction: focus on agent")
    assert r.info["action"] == "focus on agent"
    assert (r.terminated, r.truncated, r.reward, r.info["success"]) == (True, False, 0.0, False)
    assert (r.info["raw_score"], r.info["score"]) == (-100, 0.0)  # the raw -100 is kept in info
    with pytest.raises(ResetNeededError):
        env.step("look around")


def test_expert_wins_with_full_reward_only_at_the_end(env: SciWorld) -> None:
    env.reset(task_id=FIND_ANIMAL_3)
    rewards, scores = [], []
    for _ in range(env.max_steps):
        r = env.step(env.expert_action())
        rewards.append(r.reward)
        scores.append(r.info["score"])
        if r.terminated or r.truncated:
            break
    assert r.terminated and r.info["success"] is True and r.info["raw_score"] == 100
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == 1.0 == sum(rewards)
    assert 0 < max(scores[:-1]) < 1.0  # partial scores along the way show in info, not in the reward


def test_truncation_pays_the_score_reached() -> None:
    _needs_engine()
    e = SciWorld(max_steps=3, jvm_heap_mb=256)
    try:
        e.reset(task_id=FIND_ANIMAL_3)
        steps = [e.step(e.expert_action()) for _ in range(3)]
        last = steps[-1]
        assert [s.truncated for s in steps] == [False, False, True] and last.terminated is False
        assert last.info["success"] is False and 0 < last.reward == last.info["score"] < 1
        assert [s.reward for s in steps[:2]] == [0.0, 0.0]
        assert "-Xmx256m" in _cmdline(e.jvm_pid)  # type: ignore[arg-type]
    finally:
        e.close()


def test_available_actions_on_request(env: SciWorld) -> None:
    env.reset(task_id=FIND_ANIMAL_3)
    assert "available_actions" not in env.step("look around").info
    actions = env.available_actions()
    assert "look around" in actions and "focus on agent" in actions and len(actions) > 100


def test_split_table_matches_the_jar(env: SciWorld) -> None:
    env.reset(task_id=0)
    sim = env._sim
    assert sim is not None
    for task in TASKS:
        sim.load(task.name, 0)
        assert sim.max_variations(task.name) == task.variations
        for split in ("train", "dev", "test"):
            assert sim.variations(split) == list(task.split_range(split)), (task.name, split)


# -- the JVM: heap cap, close, per-process limit ----------------------------------------------------
def test_heap_cap_close_and_jvm_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_engine()
    full = threading.BoundedSemaphore(1)
    full.acquire()  # as if every slot were taken
    monkeypatch.setattr(jvm, "_LIVE", full)
    blocked = SciWorld()
    with pytest.raises(JVMLimitError, match="already live"):
        blocked.reset(task_id=0)
    assert blocked.jvm_pid is None
    full.release()

    e = SciWorld(jvm_heap_mb=384)
    e.reset(task_id=0)
    pid = e.jvm_pid
    assert pid is not None and _running(pid)
    assert "-Xmx384m" in _cmdline(pid) and os.path.basename(_cmdline(pid)[0]) == "java"
    with pytest.raises(JVMLimitError):
        blocked.reset(task_id=0)  # the one slot is taken by `e`

    os.kill(pid, signal.SIGKILL)  # a JVM that dies mid-episode is a typed error, and reset recovers
    with pytest.raises(JVMGoneError, match=str(pid)):
        e.step("look around")
    assert e.reset(task_id=0)[1]["task_name"] == "boil"
    assert e.jvm_pid not in (None, pid)
    pid = e.jvm_pid
    e.close()
    assert not _running(pid) and e.jvm_pid is None  # the JVM is gone, not leaked
    with pytest.raises(ResetNeededError, match="closed"):
        e.reset(task_id=0)
    assert full.acquire(blocking=False)  # close() gave the slot back
    full.release()
    e.close()  # idempotent
    blocked.close()
