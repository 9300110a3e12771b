"""Both agent loops record each turn's action span and the observation it acted on; parquet keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.experience.mixing import strip_context
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import (
    EpisodeSpec,
    LoopLimits,
    Trajectory,
    read_trajectories,
    run_episodes,
    write_trajectories,
)
from agentrl_core.grpo.rollout import invalid_action_rate
from agentrl_core.rollout.native import NativeEngine
from agentrl_core.rollout.trajectory import observation_key
from agentrl_core.training.action_diversity import action_diversity
from tests.rollout.scripted import BAD, expert_plan, group_scripts, play_group


@pytest.fixture(scope="module")
def chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


@pytest.fixture(scope="module")
def plan() -> list[str]:
    return expert_plan()


def assert_well_formed(traj: Trajectory) -> None:
    """Every turn: its span is exactly one maximal run of trainable tokens, and its key is the observation's."""
    assert len(traj.action_spans) == len(traj.observation_keys) == traj.num_turns
    mask = traj.loss_mask + [0]
    for k, (start, end) in enumerate(traj.action_spans):
        assert start < end and mask[start:end] == [1] * (end - start)
        assert mask[start - 1] == 0 and mask[end] == 0
        if k > 0:  # turn 0's observation is the reset's (checked with and without context below)
            assert traj.observation_keys[k] == observation_key(traj.messages[1 + 2 * k]["content"])
    assert sum(end - start for start, end in traj.action_spans) == traj.response_tokens


def test_lock_step_loop_records_spans_and_the_states_acted_in(chat, plan):
    trajs = play_group(chat, plan)
    scripts = group_scripts(plan)
    for traj, script in zip(trajs, scripts):
        assert_well_formed(traj)
        assert traj.observation_keys[0] == observation_key(traj.messages[1]["content"])
        # the span holds exactly the engine's reply ids: the action text and its closing eos
        for (start, end), action in zip(traj.action_spans, script):
            assert traj.token_ids[start:end] == chat.encode(action) + [chat.eos_id]
    s0, s1, s2 = (t.observation_keys for t in trajs)
    assert s0[0] == s1[0] == s2[0]  # one task: every episode starts in the same state
    assert s0[1] == s2[1] == s1[2]  # at countertop 1 after plan[0], whenever it was played
    assert s1[1] != s0[1] and s2[2] != s0[2]  # "Nothing happens." states are their own
    assert s0[2:4] == s1[3:5] == s2[3:5]  # then the plan's states again, in lock-step


def test_invalid_actions_are_counted_and_penalised_per_turn(chat, plan):
    # sample 0 plays the plan (no invalid command); samples 1 and 2 each say BAD once; 15 turns in all
    trajs = play_group(chat, plan, invalid_action_penalty=0.25)
    assert [t.extra["invalid_actions"] for t in trajs] == [0, 1, 1]
    assert trajs[0].turn_rewards == [0.0, 0.0, 0.0, 0.0, 1.0] and trajs[0].reward == 1.0 and trajs[0].success
    assert trajs[1].turn_rewards == [-0.25, 0.0, 0.0, 0.0, 0.0] and trajs[1].reward == -0.25
    assert trajs[2].turn_rewards[1] == -0.25 and not trajs[2].success
    assert invalid_action_rate(trajs) == {"invalid_action_rate": 2 / 15}
    silent = Trajectory(task_id=0, env="x", group=0, sample=0, num_turns=3)  # an env that never says
    assert invalid_action_rate([silent]) == {}


def test_distinct_actions_per_state_by_hand(chat, plan):
    # states of group 0 (A = start, C = countertop, then the plan's states P2, P3; N = "Nothing happens"):
    # A: plan0, BAD, plan0 (2 distinct); C: plan1, plan1, BAD (2); P2: plan2 x3 (1); P3: plan3 x3 (1);
    # visited once: sample 0's last state, sample 1's N, sample 2's N.  Mean over shared states: 6/4.
    trajs = play_group(chat, plan)
    assert trajs[1].messages[2]["content"] == BAD
    assert action_diversity(trajs) == {"distinct_actions_per_state": 1.5, "shared_state_steps": 12 / 15}
    trajs[2].error = "step failed"  # failed episodes are left out: A holds plan0, BAD (2); C plan1 x2 (1);
    # P2 (1); P3 (1): mean 5/4, and 8 of the 10 steps are in a shared state
    assert action_diversity(trajs) == {"distinct_actions_per_state": 1.25, "shared_state_steps": 8 / 10}
    assert action_diversity([]) == {"distinct_actions_per_state": 0.0, "shared_state_steps": 0.0}


def test_experience_context_is_not_part_of_the_state(chat, plan):
    plain, with_context = play_group(chat, plan)[0], play_group(chat, plan, context="Tip: look first.")[0]
    assert with_context.messages[1]["content"].endswith("Tip: look first.")
    assert with_context.observation_keys == plain.observation_keys
    assert with_context.observation_keys[0] == observation_key(plain.messages[1]["content"])
    assert with_context.action_spans != plain.action_spans  # the block lengthens the prompt...
    assert strip_context(with_context, chat)  # ...and removing it moves the spans back onto the same tokens
    assert with_context.token_ids == plain.token_ids and with_context.action_spans == plain.action_spans


def test_continuous_loop_records_the_same(tiny_model_path: Path):
    model, tok = load_model(tiny_model_path), load_tokenizer(tiny_model_path)
    chat = ChatFormat(tok)
    specs = [EpisodeSpec(task_id=t, group=t, sample=s) for t in range(2) for s in range(2)]
    trajs = run_episodes(NativeEngine(model, tok), chat, lambda: make("household", max_steps=6), specs,
                         SamplingConfig(temperature=1.0, max_new_tokens=6), LoopLimits(3, 2048), seed=5)
    assert sum(t.num_turns for t in trajs) > len(trajs)  # multi-turn
    for t in trajs:
        assert t.error is None
        assert_well_formed(t)
        assert t.observation_keys[0] == observation_key(t.messages[1]["content"])
    assert trajs[0].observation_keys[0] == trajs[1].observation_keys[0] != trajs[2].observation_keys[0]


def test_parquet_keeps_turn_records_and_reads_old_files(chat, plan, tmp_path: Path):
    trajs = play_group(chat, plan)
    back = read_trajectories(write_trajectories(tmp_path / "new.parquet", trajs))
    assert [(t.action_spans, t.observation_keys) for t in back] == [(t.action_spans, t.observation_keys) for t in trajs]
    old_rows = []  # a file written before the turn records existed
    for t in trajs:
        row = t.to_row()
        del row["action_spans"], row["observation_keys"]
        old_rows.append(row | {"extra": json.dumps(row["extra"])})
    pq.write_table(pa.Table.from_pylist(old_rows), tmp_path / "old.parquet")
    old = read_trajectories(tmp_path / "old.parquet")
    assert [t.token_ids for t in old] == [t.token_ids for t in trajs]
    assert all(t.action_spans == [] and t.observation_keys == [] for t in old)
