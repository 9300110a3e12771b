"""Summarisers: rule-based lessons from real household expert episodes; model replies parsed as JSON only."""

from __future__ import annotations

from agentrl_core.envs import make
from agentrl_core.experience.summarise import (
    ModelSummariser,
    action_sequence,
    goal_text,
    parse_model_reply,
    summarise_trajectory,
)
from agentrl_core.rollout.demos import expert_episode

from tests.experience.conftest import ScriptedEngine

# household task 3, played by its expert (checked by hand: 6 actions, reward 1)
TASK3_ACTIONS = ["go to fridge 1", "open fridge 1", "take cup 1 from fridge 1", "cool cup 1 with fridge 1",
                 "go to countertop 1", "put cup 1 on countertop 1"]


def test_expert_episode_becomes_its_action_sequence(exp_chat):
    env = make("household")
    traj = expert_episode(env, exp_chat, 3, max_turns=20)
    assert traj.success
    rec = summarise_trajectory(traj)
    assert rec is not None
    assert rec.env == "household" and rec.task_id == 3 and rec.score == 1.0
    assert rec.content == ("Task: put a cool cup on countertop 1. What worked (6 actions, reward 1): "
                           + " -> ".join(TASK3_ACTIONS) + ".")
    assert rec.when_to_use == traj.messages[1]["content"].strip()
    assert "Your task: put a cool cup on countertop 1." in rec.when_to_use


def test_failures_only_when_asked_and_below_min_score_skipped():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "Goal: open drawer 1.\nYou see a desk."},
            {"role": "assistant", "content": "go to desk 1"}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "go to desk 1"}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "look"}]
    failed = {"env": "e", "task_id": 1, "messages": msgs, "reward": 0.0, "success": False}
    assert summarise_trajectory(failed) is None
    rec = summarise_trajectory(failed, include_failures=True)
    assert rec.content == ("Task: open drawer 1. A failed attempt (2 actions, reward 0) ended with: "
                           "go to desk 1 -> look. Do not repeat this; try a different approach.")
    won = dict(failed, success=True, reward=0.5)
    assert summarise_trajectory(won, min_score=0.6) is None
    assert summarise_trajectory(won, min_score=0.5) is not None


def test_goal_and_actions_helpers():
    assert goal_text("You are here.\nYour task: heat an egg.\nActions: x") == "heat an egg"
    assert goal_text("\n  Fix the bug in foo\nmore") == "Fix the bug in foo"
    assert action_sequence([("assistant", " a  b "), ("user", "x"), ("assistant", "a b"), ("assistant", "c")]) == [
        "a b", "c"]


def test_parse_model_reply_accepts_only_the_json_asked_for():
    assert parse_model_reply('Sure! {"when_to_use": "cooling", "experience": "use the fridge"} done') == (
        "cooling", "use the fridge")
    assert parse_model_reply("no json here") is None
    assert parse_model_reply('{"when_to_use": "x"}') is None  # a field missing
    assert parse_model_reply('{"when_to_use": "x", "experience": 3}') is None  # not a string
    assert parse_model_reply("{'when_to_use': 'x', 'experience': 'y'}") is None  # python, not JSON
    assert parse_model_reply('{"when_to_use": "x", "experience": __import__("os")}') is None


def test_model_summariser_keeps_good_replies_and_counts_malformed(exp_chat):
    traj = {"env": "household", "task_id": 5, "reward": 1.0, "success": True,
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "Your task: cool a cup."},
                         {"role": "assistant", "content": "go to fridge 1"}]}
    good = ScriptedEngine(exp_chat, ['{"when_to_use": "cooling things", "experience": "cool cup 1 with fridge 1"}'])
    summariser = ModelSummariser(good, exp_chat)
    (rec,) = summariser([traj, dict(traj, success=False, reward=0.0)])  # the failure is not summarised
    assert (rec.when_to_use, rec.content, rec.score, rec.task_id) == ("cooling things", "cool cup 1 with fridge 1", 1.0, 5)
    assert summariser.malformed == 0 and len(good.prompts) == 1
    assert "cool a cup" in exp_chat.tokenizer.decode(good.prompts[0])
    bad = ModelSummariser(ScriptedEngine(exp_chat, ["I think you should cool it."]), exp_chat)
    assert bad([traj, traj]) == [] and bad.malformed == 2
