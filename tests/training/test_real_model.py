"""The real SmolLM2: a rollout over a few tokens, engine/trainer log-prob agreement, one GRPO step."""

from __future__ import annotations

import pytest
import torch

from agentrl_core.config import AlgorithmConfig, OptimConfig, SamplingConfig
from agentrl_core.envs import make
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, HFEngine, LoopLimits, run_episodes
from agentrl_core.training.batching import collate
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.optim import build_optimizer
from agentrl_core.training.policy_update import UpdateContext, policy_update

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rollout(embedded_model_path):
    model, tok = load_model(embedded_model_path), load_tokenizer(embedded_model_path)
    engine, chat = HFEngine(model, tok), ChatFormat(tok)
    specs = [EpisodeSpec(task_id=t, group=t, sample=s) for t in range(2) for s in range(2)]
    trajs = run_episodes(engine, chat, lambda: make("countdown"), specs, SamplingConfig(temperature=1.0, max_new_tokens=8),
                         LoopLimits(max_turns=2, max_context_tokens=2048), seed=3)
    return model, tok, trajs


def test_rollout_records_tokens_and_outcomes(rollout):
    _, tok, trajs = rollout
    assert len(trajs) == 4 and all(t.error is None for t in trajs)
    for t in trajs:
        assert 1 <= t.num_turns <= 2 and 0 < t.response_tokens <= 2 * 8 + 2
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        assert all(lp <= 0 for lp in t.logprobs)
        assert tok.decode(t.token_ids[: t.prompt_len]).startswith("<|im_start|>system")


def test_engine_and_trainer_logprobs_agree(rollout):
    model, tok, trajs = rollout
    mb = collate(trajs, list(range(len(trajs))), tok.pad_token_id)
    with torch.no_grad():
        stats = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask)
    diff = ((stats.logprobs - mb.engine_logprobs).abs() * mb.target_mask).sum() / mb.target_mask.sum()
    assert float(diff) < 1e-2


def test_one_grpo_step_changes_every_trained_parameter(rollout, embedded_model_path):
    _, tok, trajs = rollout
    policy = load_model(embedded_model_path)
    policy.train()
    for i, t in enumerate(trajs):
        t.reward = float(i % 2)  # both groups get a spread, so every sequence has a non-zero advantage
    opt, sched = build_optimizer(policy, OptimConfig(lr=1e-4), total_steps=1)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    ctx = UpdateContext(policy, opt, sched, AlgorithmConfig(), grad_clip=1.0, micro_batch_tokens=2048,
                        pad_id=tok.pad_token_id)
    metrics = policy_update(ctx, trajs)
    assert metrics["grad_norm"] > 0 and metrics["adv_abs_mean"] > 0
    unchanged = [n for n, p in policy.named_parameters() if torch.equal(p.detach(), before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
