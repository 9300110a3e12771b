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
from agentrl_core.training.shared_prefix import plan_group_batches, plan_prefixes, split_rows


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


def repeating_batch(seed: int = 0, groups: int = 3, size: int = 6) -> list[Trajectory]:
    """Trajectories as a near-deterministic policy makes them: each sample repeats the first k turns (reply and
    observation) of its group's first sample, then goes its own way; one sample repeats it whole."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        head = [rng.randrange(5, 500) for _ in range(30 + g)]
        turns = [([rng.randrange(5, 500) for _ in range(rng.randint(8, 14))],
                  [rng.randrange(5, 500) for _ in range(rng.randint(8, 14))]) for _ in range(4)]
        for s in range(size):
            t = Trajectory(task_id=g, env="scripted", group=g, sample=s)
            t.append(head, trainable=False)
            t.prompt_len = len(head)
            keep = len(turns) if s == 1 else rng.randint(0, len(turns) - 1)
            for k, (reply, obs) in enumerate(turns):
                if k >= keep:
                    reply = [rng.randrange(5, 500) for _ in range(rng.randint(2, 6))]
                    obs = [rng.randrange(5, 500) for _ in range(rng.randint(2, 5))]
                t.append(reply, trainable=True, logprobs=[-1.0] * len(reply))
                t.append(obs, trainable=False)
            t.reward = float(rng.random() < 0.5)
            out.append(t)
    return out


def test_prefixes_share_the_prompt_and_stop_where_samples_part():
    trajs = group_batch()
    groups = plan_prefixes(trajs, list(range(len(trajs))))
    assert [len(g.rows) for g in groups] == [4, 4, 4]
    assert [g.length for g in groups] == [40, 41, 42]  # the prompt: the replies differ from their first token
    lone = plan_prefixes(trajs, [0, 5, 9])
    assert [(g.rows, g.length) for g in lone] == [((0, 1, 2), 0)]  # one row per group: nothing to share, run whole


def test_rows_are_split_where_sharing_saves_most():
    p = list(range(100, 130))
    a = p + list(range(200, 220))
    c = p + list(range(200, 210)) + list(range(300, 310))
    d = p[:20] + list(range(400, 430))
    # all four share 20 tokens (saves 3·20); a, a, c share 40 (saves 2·40) and d runs whole; the two copies of a
    # share all 50 but keep one token of their own (saves 49)
    assert sorted(split_rows([a, a, c, d])) == [([0, 1, 2], 40), ([3], 0)]
    assert split_rows([a, a]) == [([0, 1], 49)]
    assert sorted(split_rows([a, d])) == [([0, 1], 20)]
    assert sorted(split_rows([p[:10] + a, list(range(5))])) == [([0], 0), ([1], 0)]


def test_prefixes_cover_the_turns_samples_repeat():
    trajs = repeating_batch()
    idx = list(range(len(trajs)))
    groups = plan_prefixes(trajs, idx)
    assert sorted(r for g in groups for r in g.rows) == idx  # every row in exactly one group
    for g in groups:
        seqs = [trajs[r].token_ids for r in g.rows]
        assert all(s[: g.length] == seqs[0][: g.length] for s in seqs)
        assert all(len(s) > g.length for s in seqs)
    prompt_only = sum((6 - 1) * (30 + g) for g in range(3))
    assert sum(g.saved_tokens for g in groups) > prompt_only  # repeated turns, targets among them, are shared too


def test_group_batches_keep_groups_together_and_cover_all():
    trajs = group_batch(groups=5)
    plan = plan_group_batches(trajs, token_budget=300)
    assert sorted(i for b in plan for i in b) == list(range(len(trajs)))
    for b in plan:
        assert len({trajs[i].group for i in b}) >= 1
    split = plan_group_batches(trajs, token_budget=64)  # a group over the budget is split into chunks
    assert sorted(i for b in split for i in b) == list(range(len(trajs)))


@pytest.mark.parametrize("make", [group_batch, repeating_batch])
@pytest.mark.parametrize("autocast", ["float32", "bfloat16"])
def test_logprobs_and_entropy_equal_the_plain_forward(tiny_model_path, autocast, make):
    model = load_model(tiny_model_path)
    trajs = make()
    idx = list(range(len(trajs)))
    mb = collate(trajs, idx, pad_id=0)
    plain = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, with_entropy=True,
                           autocast=autocast)
    shared = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, with_entropy=True,
                            autocast=autocast, prefixes=plan_prefixes(trajs, idx))
    tol = 1e-5 if autocast == "float32" else 3e-2
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=tol, rtol=0)
    torch.testing.assert_close(shared.entropy, plain.entropy, atol=tol, rtol=0)


def _update(model_path, shared: bool, make=group_batch):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=1e-3), total_steps=1)
    ctx = UpdateContext(model, opt, sched, AlgorithmConfig(), grad_clip=1e9, micro_batch_tokens=4096, pad_id=0,
                        shared_prefix=shared)
    before = copy.deepcopy(model.state_dict())
    metrics = policy_update(ctx, make())
    return metrics, before, model.state_dict(), ctx


def test_an_update_with_shared_turns_equals_the_plain_update(tiny_model_path):
    m_plain, before, w_plain, _ = _update(tiny_model_path, False, repeating_batch)
    m_shared, _, w_shared, ctx = _update(tiny_model_path, True, repeating_batch)
    assert m_shared["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-4)
    assert m_shared["loss"] == pytest.approx(m_plain["loss"], abs=1e-6)
    for name in w_plain:
        torch.testing.assert_close(w_shared[name], w_plain[name], atol=2e-5, rtol=1e-4)
    assert any(not torch.equal(w_shared[n], before[n]) for n in before)


def test_an_update_with_shared_prompts_equals_the_plain_update(tiny_model_path):
    m_plain, before, w_plain, _ = _update(tiny_model_path, False)
    m_shared, _, w_shared, ctx = _update(tiny_model_path, True)
    assert m_shared["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-4)
    assert m_shared["loss"] == pytest.approx(m_plain["loss"], abs=1e-6)
    for name in w_plain:
        torch.testing.assert_close(w_shared[name], w_plain[name], atol=2e-5, rtol=1e-4)  # Adam scales tiny grads up
    assert any(not torch.equal(w_shared[n], before[n]) for n in before)
    batches = plan_batches(ctx, group_batch())
    assert sum(g.saved_tokens for mb in batches for g in mb.prefixes) == 3 * (40 + 41 + 42)


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
