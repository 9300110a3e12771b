"""Shared-prompt training forward: the same log-probs, entropy and gradients as the plain one, less work."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from agentrl_core.config import AlgorithmConfig, OptimConfig
from agentrl_core.models import load_model
from agentrl_core.rollout.trajectory import Trajectory
from agentrl_core.training.batching import collate
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.optim import build_optimizer
from agentrl_core.training.policy_update import UpdateContext, plan_batches, policy_update
from agentrl_core.training.shared_prefix import plan_group_batches, plan_prefixes


def group_batch(seed: int = 0, groups: int = 3, size: int = 4, prompt: int = 40) -> list[Trajectory]:
    """GRPO-shaped trajectories: each group shares a prompt, then replies and observations differ."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        head = [rng.randrange(5, 500) for _ in range(prompt + g)]
        for s in range(size):
            t = Trajectory(task_id=g, env="scripted", group=g, sample=s)
            t.append(head, trainable=False)
            t.prompt_len = len(head)
            for _ in range(rng.randint(1, 3)):
                n = rng.randint(2, 6)
                t.append([rng.randrange(5, 500) for _ in range(n)], trainable=True, logprobs=[-1.0] * n)
                t.append([rng.randrange(5, 500) for _ in range(rng.randint(2, 5))], trainable=False)
            t.reward = float(rng.random() < 0.5)
            out.append(t)
    return out


def test_prefixes_stop_before_the_first_target():
    trajs = group_batch()
    groups = plan_prefixes(trajs, list(range(len(trajs))))
    assert [len(g.rows) for g in groups] == [4, 4, 4]
    assert [g.length for g in groups] == [39, 40, 41]  # the prompt minus the token that predicts the first reply
    lone = plan_prefixes(trajs, [0, 5, 9])
    assert all(g.length == 0 for g in lone)  # one row per group: nothing to share


def test_group_batches_keep_groups_together_and_cover_all():
    trajs = group_batch(groups=5)
    plan = plan_group_batches(trajs, token_budget=300)
    assert sorted(i for b in plan for i in b) == list(range(len(trajs)))
    for b in plan:
        assert len({trajs[i].group for i in b}) >= 1
    split = plan_group_batches(trajs, token_budget=64)  # a group over the budget is split into chunks
    assert sorted(i for b in split for i in b) == list(range(len(trajs)))


@pytest.mark.parametrize("autocast", ["float32", "bfloat16"])
def test_logprobs_and_entropy_equal_the_plain_forward(tiny_model_path, autocast):
    model = load_model(tiny_model_path)
    trajs = group_batch()
    idx = list(range(len(trajs)))
    mb = collate(trajs, idx, pad_id=0)
    plain = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, with_entropy=True,
                           autocast=autocast)
    shared = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, with_entropy=True,
                            autocast=autocast, prefixes=plan_prefixes(trajs, idx))
    tol = 1e-5 if autocast == "float32" else 3e-2
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=tol, rtol=0)
    torch.testing.assert_close(shared.entropy, plain.entropy, atol=tol, rtol=0)


def _update(model_path, shared: bool):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=1e-3), total_steps=1)
    ctx = UpdateContext(model, opt, sched, AlgorithmConfig(), grad_clip=1e9, micro_batch_tokens=4096, pad_id=0,
                        shared_prefix=shared)
    before = copy.deepcopy(model.state_dict())
    metrics = policy_update(ctx, group_batch())
    return metrics, before, model.state_dict(), ctx


def test_an_update_with_shared_prompts_equals_the_plain_update(tiny_model_path):
    m_plain, before, w_plain, _ = _update(tiny_model_path, False)
    m_shared, _, w_shared, ctx = _update(tiny_model_path, True)
    assert m_shared["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-4)
    assert m_shared["loss"] == pytest.approx(m_plain["loss"], abs=1e-6)
    for name in w_plain:
        torch.testing.assert_close(w_shared[name], w_plain[name], atol=2e-5, rtol=1e-4)  # Adam scales tiny grads up
    assert any(not torch.equal(w_shared[n], before[n]) for n in before)
    batches = plan_batches(ctx, group_batch())
    assert sum(g.saved_tokens for mb in batches for g in mb.prefixes) == 3 * (39 + 40 + 41)


def test_gradient_checkpointing_runs_rows_whole(tiny_model_path):
    model = load_model(tiny_model_path)
    model.gradient_checkpointing_enable()
    model.train()
    trajs = group_batch()
    idx = list(range(len(trajs)))
    mb = collate(trajs, idx, pad_id=0)
    with torch.no_grad():
        plain = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask)
        shared = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask,
                                prefixes=plan_prefixes(trajs, idx))
    assert torch.equal(shared.logprobs, plain.logprobs)


def test_samples_without_advantage_are_skipped_and_the_update_is_unchanged(tiny_model_path, monkeypatch):
    from agentrl_core.training import policy_update as pu

    def batch():
        trajs = group_batch(seed=3)
        for t in trajs:
            if t.group == 1:
                t.reward = 1.0  # a group with equal rewards: every advantage 0
        return trajs

    def run(skip: bool):
        if not skip:
            monkeypatch.setattr(pu, "rows_with_gradient", lambda adv, mask, cfg: list(range(adv.shape[0])))
        torch.manual_seed(0)
        model = load_model(tiny_model_path)
        model.train()
        opt, sched = build_optimizer(model, OptimConfig(lr=1e-3), total_steps=1)
        ctx = UpdateContext(model, opt, sched, AlgorithmConfig(), grad_clip=1e9, micro_batch_tokens=4096, pad_id=0,
                            shared_prefix=True)
        return policy_update(ctx, batch()), model.state_dict()

    m_skip, w_skip = run(True)
    m_all, w_all = run(False)
    assert m_skip["samples_backpropagated"] == 8 and m_all["samples_backpropagated"] == 12
    assert m_skip["grad_norm"] == pytest.approx(m_all["grad_norm"], rel=1e-5)
    assert m_skip["pg_loss"] == pytest.approx(m_all["pg_loss"], abs=1e-7)
    for name in w_all:
        torch.testing.assert_close(w_skip[name], w_all[name], atol=2e-5, rtol=1e-4)
