"""An episode the agent loop cuts off keeps the reward its environment says it earned so far (envs.reward_so_far)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.reward_so_far import REWARD_SO_FAR, check_reward_so_far, credit
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, LoopLimits, run_episodes
from agentrl_core.rollout.native import NativeEngine
from tests.rollout.test_chat_and_loop import ReportingEnv, ScriptedEngine


@pytest.fixture(scope="module")
def chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


def test_check_accepts_a_number_in_range_and_names_what_is_wrong() -> None:
    assert check_reward_so_far(1, (0.0, 2.0)) == 1.0
    for bad in (True, "0.5", math.nan, math.inf, -0.1, 2.5, None):
        with pytest.raises(ValueError, match=r"info\['reward_so_far'\] must be a number in the env's reward_range \[0.0, 2.0\]"):
            check_reward_so_far(bad, (0.0, 2.0))


def test_credit_moves_the_difference_onto_the_last_step() -> None:
    rewards = [0.0, -0.1, 0.0]
    credit(rewards, 0.5)
    assert rewards == pytest.approx([0.0, -0.1, 0.6]) and math.fsum(rewards) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one step"):
        credit([], 0.5)


class ProgressEnv(ReportingEnv):
    """Scores at the end only (1.0 when reply 4 ends it), reporting replies/4 so far on every step; `report=False`
    reports nothing, `bad=True` reports a value outside reward_range."""

    name = "progress"
    max_steps = 100

    def __init__(self, report: bool = True, bad: bool = False):
        super().__init__(bad)
        self.report = report

    def _step(self, action) -> StepResult:
        self.replies += 1
        done = self.replies == 4
        info = {"success": done} if done else {}
        if self.report:
            info[REWARD_SO_FAR] = 3.0 if self.bad else self.replies / 4
        return StepResult("more", 1.0 if done else 0.0, done, False, info)


def _play(chat: ChatFormat, limits: LoopLimits, **env_kwargs):
    (traj,) = run_episodes(ScriptedEngine(chat, ["go"]), chat, lambda: ProgressEnv(**env_kwargs), [EpisodeSpec(task_id=0)],
                           SamplingConfig(), limits)
    return traj


def test_an_episode_cut_at_max_turns_gets_its_reward_so_far(chat: ChatFormat) -> None:
    traj = _play(chat, LoopLimits(max_turns=3, max_context_tokens=4096))
    assert traj.truncated and traj.extra["truncated_by"] == "max_turns" and traj.error is None
    assert traj.turn_rewards == [0.0, 0.0, 0.75] and traj.reward == 0.75 and not traj.success


def test_an_episode_cut_by_its_context_gets_its_reward_so_far(chat: ChatFormat) -> None:
    opening = _play(chat, LoopLimits(max_turns=1, max_context_tokens=4096))
    per_turn = len(_play(chat, LoopLimits(max_turns=2, max_context_tokens=4096)).token_ids) - len(opening.token_ids)
    # the prompt, then two replies with their observations reach the limit: the second observation does not fit
    traj = _play(chat, LoopLimits(max_turns=10, max_context_tokens=len(opening.token_ids) + per_turn))
    assert traj.truncated and traj.extra["truncated_by"] == "context" and traj.num_turns == 2
    assert traj.turn_rewards == [0.0, 0.5] and traj.reward == 0.5


def test_an_episode_the_env_ends_keeps_its_own_reward_and_silence_changes_nothing(chat: ChatFormat) -> None:
    ended = _play(chat, LoopLimits(max_turns=10, max_context_tokens=4096))
    assert ended.terminated and not ended.truncated and ended.reward == 1.0 and ended.turn_rewards == [0, 0, 0, 1.0]
    silent = _play(chat, LoopLimits(max_turns=3, max_context_tokens=4096), report=False)
    assert silent.truncated and silent.reward == 0.0 and silent.turn_rewards == [0.0, 0.0, 0.0]


def test_a_reward_so_far_outside_the_range_is_an_error_not_a_reward(chat: ChatFormat) -> None:
    traj = _play(chat, LoopLimits(max_turns=3, max_context_tokens=4096), bad=True)
    assert traj.error.startswith("step failed: the environment's info is malformed: info['reward_so_far']")
    assert traj.num_turns == 1


def test_the_continuous_loop_credits_it_too(tiny_model_path: Path) -> None:
    model, tok = load_model(tiny_model_path), load_tokenizer(tiny_model_path)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=4)
    trajs = run_episodes(NativeEngine(model, tok), ChatFormat(tok), ProgressEnv,
                         [EpisodeSpec(task_id=0, sample=s) for s in range(2)], sampling, LoopLimits(3, 2048), seed=1)
    assert all(t.truncated and t.extra["truncated_by"] == "max_turns" and t.reward == 0.75 for t in trajs)


# -- BFCL: the environment whose reward comes at the end -------------------------------------------


def _bfcl_expert_replies(env: Env, task_id: int) -> list[str]:
    env.reset(task_id=task_id)
    replies = []
    for _ in range(env.max_steps):
        replies.append(env.expert_action())
        result = env.step(replies[-1])
        if result.terminated or result.truncated:
            return replies
    raise AssertionError(f"the BFCL expert did not finish task {task_id}")


def _cut_bfcl(chat: ChatFormat, env_factory, task_id: int = 0):
    plan = _bfcl_expert_replies(env_factory(), task_id)
    assert len(plan) == 8  # multi_turn_base_0: 4 turns, each a call then an answer
    (traj,) = run_episodes(ScriptedEngine(chat, plan), chat, env_factory, [EpisodeSpec(task_id=task_id)],
                           SamplingConfig(), LoopLimits(max_turns=5, max_context_tokens=16384))
    return traj


def test_a_cut_off_bfcl_episode_keeps_its_progress(chat: ChatFormat) -> None:
    pytest.importorskip("bfcl_eval")
    from agentrl_core.envs.bfcl import Bfcl

    stage3 = _cut_bfcl(chat, lambda: Bfcl(stage=3))
    # 5 of the expert's 8 replies: turns 0 and 1 passed, turn 2 called and was cut: 2 of 4 turns
    assert stage3.truncated and stage3.extra["truncated_by"] == "max_turns"
    assert stage3.extra["episode_metrics"]["progress"] == 0.5 and stage3.reward == 0.5
    stage2 = _cut_bfcl(chat, lambda: Bfcl(stage=2))
    # log [-1, 1, -1, 1, -1] and the two unended turns as 0: 7 rounds, no format error, every call ran
    assert stage2.reward == pytest.approx(7 / 7 + 3 / 3)


def test_a_cut_off_bfcl_episode_keeps_its_progress_over_http(chat: ChatFormat, env_server_url: str) -> None:
    pytest.importorskip("bfcl_eval")
    from agentrl_core.env_service import EnvClient, RemoteEnv

    with EnvClient(env_server_url) as client:
        traj = _cut_bfcl(chat, lambda: RemoteEnv(client, "bfcl"))  # the server's bfcl: stage 3
    assert traj.truncated and traj.reward == 0.5 and traj.extra["episode_metrics"]["progress"] == 0.5
