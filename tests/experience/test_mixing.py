"""Mixed rollouts: exact per-group counts, determinism, the block reaching the prompt, token-exact stripping."""

from __future__ import annotations

from collections import Counter

import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.experience.mixing import (
    block_size,
    choose_samples,
    experience_count,
    experience_metrics,
    original_messages,
    render_block,
    strip_context,
    with_experience,
)
from agentrl_core.rollout import EpisodeSpec, LoopLimits, run_episodes

from tests.experience.conftest import ScriptedEngine
from tests.experience.test_summarise import TASK3_ACTIONS


def specs_of(groups: dict[int, int]) -> list[EpisodeSpec]:
    return [EpisodeSpec(task_id=10 + g, group=g, sample=s) for g, n in groups.items() for s in range(n)]


def test_ratio_gives_exact_counts_per_group_deterministically():
    assert [experience_count(n, 0.5) for n in (1, 2, 3, 4, 5, 8)] == [1, 1, 2, 2, 3, 4]  # floor(n/2 + 0.5)
    assert experience_count(7, 0.0) == 0 and experience_count(7, 1.0) == 7 and experience_count(4, 0.3) == 1
    specs = specs_of({0: 4, 1: 5, 2: 8})
    chosen = choose_samples(specs, 0.5, seed=11)
    per_group = Counter(s.group for s, c in zip(specs, chosen) if c)
    assert per_group == {0: 2, 1: 3, 2: 4}
    assert choose_samples(specs, 0.5, seed=11) == chosen
    assert any(choose_samples(specs, 0.5, seed=s) != chosen for s in range(12, 20))
    assert sum(choose_samples(specs, 1.0, seed=1)) == 17 and sum(choose_samples(specs, 0.0, seed=1)) == 0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        experience_count(3, 1.5)


def test_block_rendering_and_injection():
    block = render_block(["Task: a. What worked:\n go to x", "  ", "avoid y"])
    assert block == "Relevant experience:\n- Task: a. What worked: go to x\n- avoid y"
    assert block_size(block) == 2 and render_block([]) is None and block_size(None) == 0
    specs = specs_of({0: 2})
    out = with_experience(specs, [True, False], {10: block})
    assert out[0].context == block and out[1].context is None and out[0].task_id == specs[0].task_id


def test_context_reaches_the_prompt_and_stripping_is_token_exact(exp_chat):
    block = render_block(["Task: put a cool cup on countertop 1. What worked: go to fridge 1 -> open fridge 1"])
    specs = [EpisodeSpec(task_id=3, group=0, sample=0, context=block), EpisodeSpec(task_id=3, group=0, sample=1)]
    engine = ScriptedEngine(exp_chat, TASK3_ACTIONS)
    limits = LoopLimits(max_turns=10, max_context_tokens=4096)
    with_exp, plain = run_episodes(engine, exp_chat, lambda: make("household"), specs, SamplingConfig(), limits)
    assert with_exp.success and plain.success and with_exp.error is None
    # the engine saw the block in the first prompt of sample 0 only
    assert block in exp_chat.tokenizer.decode(engine.prompts[0]) and block not in exp_chat.tokenizer.decode(engine.prompts[1])
    assert with_exp.messages[1]["content"].endswith("\n\n" + block) and with_exp.extra["context"] == block
    assert original_messages(with_exp) == plain.messages
    metrics = experience_metrics([with_exp, plain])
    assert metrics["exp/with_success"] == 1.0 and metrics["exp/without_success"] == 1.0
    assert metrics["exp/with_samples"] == 1.0 and metrics["exp/retrieved"] == 1.0

    p = with_exp.prompt_len
    model_part = (with_exp.token_ids[p:], with_exp.loss_mask[p:], with_exp.logprobs[p:])
    assert strip_context(with_exp, exp_chat) is True
    # identical to the episode that never had the block: prompt rebuilt, every later token kept
    assert with_exp.token_ids == plain.token_ids and with_exp.loss_mask == plain.loss_mask
    assert with_exp.prompt_len == plain.prompt_len < p
    assert (with_exp.token_ids[with_exp.prompt_len:], with_exp.loss_mask[with_exp.prompt_len:],
            with_exp.logprobs[with_exp.prompt_len:]) == model_part
    assert block not in exp_chat.tokenizer.decode(with_exp.token_ids)
    assert with_exp.messages == plain.messages and with_exp.extra["context_stripped"]
    assert strip_context(with_exp, exp_chat) is False and strip_context(plain, exp_chat) is False
    assert experience_metrics([with_exp])["exp/with_samples"] == 1.0  # still counted as "with" after stripping


def test_strip_refuses_a_prompt_that_is_not_the_template(exp_chat):
    block = render_block(["lesson"])
    engine = ScriptedEngine(exp_chat, ["look"])
    (traj,) = run_episodes(engine, exp_chat, lambda: make("household"), [EpisodeSpec(task_id=3, context=block)],
                           SamplingConfig(), LoopLimits(max_turns=1, max_context_tokens=4096))
    traj.token_ids[0] += 1
    with pytest.raises(ValueError, match="token-exactly"):
        strip_context(traj, exp_chat)
