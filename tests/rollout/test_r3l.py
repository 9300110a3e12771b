"""R3L reflect-then-retry rollout: reflection parsing, replay, token-exact guided splicing, groups, advantages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentrl_core.algorithms.r3l import r3l_advantage
from agentrl_core.config import AlgorithmConfig, SamplingConfig
from agentrl_core.envs import make
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Generation, LoopLimits
from agentrl_core.rollout.r3l import (
    R3LSettings,
    ReflectionError,
    parse_reflection,
    r3l_metrics,
    replay,
    run_r3l_episodes,
    turn_starts,
)
from tests.rollout.scripted import expert_plan

TASK = 7  # household task 7: the expert solves it in 5 steps
GUIDE = "GUIDEMARK clean the bowl first"
BAD = "dance wildly"


@pytest.fixture(scope="module")
def chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


@pytest.fixture(scope="module")
def plan() -> list[str]:
    return expert_plan(TASK)


class ScriptedAgent:
    """Fake engine: answers reflection prompts with `reflection`; without guidance in context plays
    BAD; with it plays the expert plan (turn n after the guidance plays plan[n]). Log-prob -0.5."""

    def __init__(self, chat: ChatFormat, plan: list[str], reflection: str):
        self.chat, self.plan, self.reflection, self.prompts = chat, plan, reflection, []

    def _reply(self, text: str) -> str:
        if "Reply with only a JSON object" in text:
            return self.reflection
        if "GUIDEMARK" not in text:
            return BAD
        return self.plan[text.split("GUIDEMARK", 1)[1].count("<|im_start|>assistant") - 1]

    def generate(self, prompts, sampling, seed):
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            ids = self.chat.encode(self._reply(self.chat.tokenizer.decode(p))) + [self.chat.eos_id]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        return out


def reflection_text(step: int) -> str:
    return "Here it is:\n```json\n" + json.dumps({"analysis": "I danced.", "retry_step": step, "guidance": GUIDE}) + "\n```"


def run(chat, engine, *, group_size=2, cap=1, max_turns=8, factory=lambda: make("household")):
    specs = [EpisodeSpec(task_id=TASK, group=5, sample=s) for s in range(group_size)]
    return run_r3l_episodes(engine, chat, factory, specs, SamplingConfig(), LoopLimits(max_turns, 4096),
                            R3LSettings(max_reflection_tokens=64, max_retries_per_group=cap), workers=2)


# ---- reflection parsing


def test_a_good_reflection_parses_out_of_surrounding_text():
    r = parse_reflection(reflection_text(2), num_turns=3)
    assert (r.analysis, r.retry_step, r.guidance) == ("I danced.", 2, GUIDE)


@pytest.mark.parametrize("text, why", [
    ("no json here", "no JSON object"),
    ('{"analysis": "x", "retry_step": 1, "guidance": "g",}', "not valid JSON"),
    ("[1, 2]", "no JSON object"),
    ('{"analysis": "x", "retry_step": "1", "guidance": "g"}', "must be an integer"),
    ('{"analysis": "x", "retry_step": true, "guidance": "g"}', "must be an integer"),
    ('{"analysis": "x", "retry_step": 1, "guidance": "  "}', "non-empty"),
    ('{"analysis": 3, "retry_step": 1, "guidance": "g"}', "analysis must be a string"),
    ('{"analysis": "x", "retry_step": 3, "guidance": "g"}', "outside the attempt's steps 0..2"),
    ('{"analysis": "x", "retry_step": -1, "guidance": "g"}', "outside"),
])
def test_malformed_or_out_of_range_reflections_raise_reflection_error(text, why):
    with pytest.raises(ReflectionError, match=why):
        parse_reflection(text, num_turns=3)


# ---- the rollout with a scripted engine and the real household env


@pytest.mark.parametrize("pivot", [0, 2])
def test_retry_is_spliced_without_guidance_and_masked_before_the_pivot(chat, plan, pivot):
    engine = ScriptedAgent(chat, plan, reflection_text(pivot))
    trajs = run(chat, engine)
    assert [t.extra["r3l"]["role"] for t in trajs] == ["attempt", "attempt", "retry"]
    a0, a1, retry = trajs
    assert not a0.success and a0.num_turns == 8 and a0.extra["r3l"]["reflection"] == "ok"
    assert a1.extra["r3l"] == {"role": "attempt"}  # cap 1 per group: only sample 0 reflects
    assert (retry.group, retry.sample, retry.task_id) == (5, 2, TASK)
    expected = {"role": "retry", "pivot": pivot, "parent_sample": 0, "logprobs_context": "guided", "guidance": GUIDE}
    assert retry.extra["r3l"].items() >= expected.items()
    # the guided context was really used for generation, but its tokens are nowhere in the stored trajectory
    assert any("GUIDEMARK" in chat.tokenizer.decode(p) for p in engine.prompts)
    assert "GUIDEMARK" not in chat.tokenizer.decode(retry.token_ids)
    assert all("GUIDEMARK" not in m["content"] for m in retry.messages)
    assert len(retry.token_ids) == len(retry.loss_mask) == len(retry.logprobs)
    # turns before the pivot: the attempt's exact ids, loss-masked; after: the plan, trainable
    cut = turn_starts(a0)[pivot]
    assert retry.token_ids[:cut] == a0.token_ids[:cut] and retry.loss_mask[:cut] == [0] * cut
    starts = turn_starts(retry)
    assert starts[0] == cut and len(starts) == len(plan)
    replies = [chat.decode_reply(retry.token_ids[s:s + (retry.loss_mask[s:] + [0]).index(0)]) for s in starts]
    assert replies == plan
    assert all(lp == -0.5 for lp, m in zip(retry.logprobs, retry.loss_mask) if m)
    assert retry.success and retry.terminated and retry.reward == 1.0 and retry.num_turns == pivot + len(plan)
    # the stored ids are exactly the chat template over the stored (guidance-free) messages
    rendered = chat.tokenizer.apply_chat_template(retry.messages, tokenize=False)
    assert rendered.startswith(chat.tokenizer.decode(retry.token_ids))
    assert [m["content"] for m in retry.messages[2:2 + 2 * pivot:2]] == [BAD] * pivot


def test_a_successful_retry_gets_advantage_one_in_its_attempts_group(chat, plan):
    trajs = run(chat, ScriptedAgent(chat, plan, reflection_text(1)))
    rewards = torch.tensor([t.reward for t in trajs])
    groups = torch.tensor([t.group for t in trajs])
    mask = torch.ones(len(trajs), 2)
    adv = r3l_advantage(rewards, groups, mask, AlgorithmConfig(advantage="r3l", policy_loss="opmd"))
    # rewards [0, 0, 1] in one group: mean 1/3; failures -1/3 (negative: not amplified), the success 1.0
    assert torch.allclose(adv[:, 0], torch.tensor([-1 / 3, -1 / 3, 1.0]))
    m = r3l_metrics(trajs)
    assert m["r3l/reflections"] == 1 and m["r3l/retries"] == 1 and m["r3l/retry_success_rate"] == 1.0
    assert m["r3l/malformed_reflections"] == 0 and m["r3l/attempt_success_rate"] == 0.0


def test_malformed_reflections_are_counted_and_skip_the_retry(chat, plan):
    trajs = run(chat, ScriptedAgent(chat, plan, '{"analysis": "x", "retry_step": 99, "guidance": "g"}'), cap=0)
    assert [t.extra["r3l"]["role"] for t in trajs] == ["attempt", "attempt"]
    assert "outside" in trajs[0].extra["r3l"]["reflection_error"]
    m = r3l_metrics(trajs)
    assert (m["r3l/reflections"], m["r3l/malformed_reflections"], m["r3l/retries"]) == (2.0, 2.0, 0.0)
    assert m["r3l/retry_success_rate"] == 0.0


def test_replay_reproduces_the_recorded_observations(chat, plan):
    (attempt,) = run(chat, ScriptedAgent(chat, plan, "not json"), group_size=1, max_turns=3)
    env = make("household")
    assert replay(env, attempt, EpisodeSpec(task_id=TASK), 2) == [0.0, 0.0]
    assert attempt.messages[3]["content"].startswith("Nothing happens.")


def test_the_retry_replays_through_the_env_server(chat, plan, env_server_url):
    from agentrl_core.env_service import EnvClient, RemoteEnv

    with EnvClient(env_server_url, timeout=30) as client:
        trajs = run(chat, ScriptedAgent(chat, plan, reflection_text(1)), factory=lambda: RemoteEnv(client, "household"))
    assert [t.extra["r3l"]["role"] for t in trajs] == ["attempt", "attempt", "retry"]
    assert trajs[2].success and trajs[2].extra["r3l"]["pivot"] == 1 and trajs[0].extra["r3l"]["retry"] == "done"


class DriftingEnv(Env):
    """Observations carry a counter shared by every instance: a fresh env never reproduces them."""

    name = "drifting"
    action_format = "text"
    system_prompt = "Say anything."
    calls = 0

    def _reset(self, *, task_id, seed, options):
        return self._obs(), {}

    def _step(self, action) -> StepResult:
        return StepResult(self._obs(), 0.0, False, False, {"success": False})

    def _obs(self) -> str:
        DriftingEnv.calls += 1
        return f"tick {DriftingEnv.calls}"

    def expert_action(self):
        return "x"


def test_a_replay_that_does_not_reproduce_skips_the_retry(chat, plan):
    trajs = run(chat, ScriptedAgent(chat, plan, reflection_text(1)), group_size=1, max_turns=3, factory=DriftingEnv)
    assert len(trajs) == 1 and trajs[0].extra["r3l"]["retry"] == "skipped_replay"
    assert r3l_metrics(trajs)["r3l/skipped_retries"] == 1.0


def test_r3l_retry_refuses_dynamic_sampling_and_tis():
    with pytest.raises(ValueError, match="dynamic_sampling"):
        AlgorithmConfig(r3l_retry=True, dynamic_sampling=True)
    with pytest.raises(ValueError, match="tis_cap"):
        AlgorithmConfig(r3l_retry=True, tis_cap=2.0)


# ---- the real model, tiny budget


class ForcedReflection:
    """The real engine for actions and the retry; a fixed valid reflection (the 135M model rarely writes one)."""

    def __init__(self, engine, chat: ChatFormat):
        self.engine, self.chat = engine, chat

    def generate(self, prompts, sampling, seed):
        if "Reply with only a JSON object" in self.chat.tokenizer.decode(prompts[0]):
            ids = self.chat.encode(reflection_text(0)) + [self.chat.eos_id]
            return [Generation(list(ids), [-1.0] * len(ids), "stop") for _ in prompts]
        return self.engine.generate(prompts, sampling, seed)


@pytest.mark.slow
def test_r3l_rollout_runs_end_to_end_with_smollm2(embedded_model_path: Path):
    from agentrl_core.models import load_model
    from agentrl_core.rollout import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the test machine's cores are shared: more threads only spin
    try:
        tok = load_tokenizer(embedded_model_path)
        chat = ChatFormat(tok)
        engine = ForcedReflection(HFEngine(load_model(embedded_model_path).eval(), tok), chat)
        trajs = run_r3l_episodes(engine, chat, lambda: make("household"), [EpisodeSpec(task_id=TASK, group=4)],
                                 SamplingConfig(temperature=1.0, max_new_tokens=16), LoopLimits(3, 2048),
                                 R3LSettings(max_reflection_tokens=48), seed=3, workers=2)
    finally:
        torch.set_num_threads(threads)
    attempt, *retries = trajs
    assert attempt.extra["r3l"]["role"] == "attempt" and len(retries) == (0 if attempt.success else 1)
    for t in trajs:
        assert t.error is None and len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        assert t.group == 4 and 1 <= t.num_turns <= 3 and t.response_tokens > 0
        assert all(lp <= 0.0 for lp in t.logprobs) and t.loss_mask[:t.prompt_len] == [0] * t.prompt_len
    for t in retries:  # pivot 0: same opening prompt as the attempt, without the guidance
        assert t.extra["r3l"]["role"] == "retry" and t.sample == 1 and t.extra["r3l"]["pivot"] == 0
        assert t.token_ids[:t.prompt_len] == attempt.token_ids[:attempt.prompt_len]
        assert "GUIDEMARK" not in tok.decode(t.token_ids)
    assert r3l_metrics(trajs)["r3l/retries"] == len(retries)


@pytest.mark.parametrize("pivot", [0, 2])
def test_the_stored_retry_keeps_turn_records_of_the_guidance_free_trajectory(chat, plan, pivot):
    from agentrl_core.rollout.trajectory import observation_key

    a0, _, retry = run(chat, ScriptedAgent(chat, plan, reflection_text(pivot)))
    assert len(retry.action_spans) == len(retry.observation_keys) == retry.num_turns
    assert retry.action_spans[:pivot] == a0.action_spans[:pivot]  # the attempt's turns, masked out
    assert retry.observation_keys[:pivot + 1] == a0.observation_keys[:pivot + 1]  # the pivot's state has no guidance
    for k, (start, end) in enumerate(retry.action_spans):
        assert retry.observation_keys[k] == observation_key(retry.messages[1 + 2 * k]["content"])
        assert retry.token_ids[start:end] == chat.encode(retry.messages[2 + 2 * k]["content"]) + [chat.eos_id]
        assert set(retry.loss_mask[start:end]) == {0 if k < pivot else 1}
