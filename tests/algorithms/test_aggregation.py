"""Loss aggregation: each mode by hand, LossNorm, and exact invariance under micro-batching."""

from __future__ import annotations

import pytest
import torch

from agentrl_core.algorithms import (
    AGGREGATIONS,
    LossNorm,
    get_advantage_estimator,
    get_aggregation,
    get_kl_estimator,
    get_policy_loss,
)
from agentrl_core.config import AlgorithmConfig

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])
NORM = LossNorm.for_batch(MASK, scale_tokens=4)  # 3 tokens, 2 sequences

# masked sums per sequence: [1 + 2, 4] = [3, 4]; lengths [2, 1]
EXPECTED = {
    "token-mean": 7 / 3,  # (1 + 2 + 4) / 3 tokens
    "seq-mean-token-sum": 3.5,  # (3 + 4) / 2 sequences
    "seq-mean-token-mean": 2.75,  # (3/2 + 4/1) / 2
    "seq-mean-token-sum-norm": 0.875,  # 7 / (2 sequences * 4)
}


def test_loss_norm_for_batch():
    assert NORM == LossNorm(global_tokens=3.0, global_seqs=2.0, scale_tokens=4.0)
    # a sequence without model tokens (failed rollout) does not count; an all-masked batch gives 1s
    assert LossNorm.for_batch(torch.tensor([[1, 1, 0], [0, 0, 0]]), 8).global_seqs == 1.0
    empty = LossNorm.for_batch(torch.zeros(2, 3, dtype=torch.bool), 8)
    assert (empty.global_tokens, empty.global_seqs) == (1.0, 1.0)


@pytest.mark.parametrize("bad", [dict(global_tokens=0.0), dict(global_seqs=-1.0), dict(scale_tokens=float("nan"))])
def test_loss_norm_rejects_non_positive(bad):
    fields = dict(global_tokens=3.0, global_seqs=2.0, scale_tokens=4.0) | bad
    with pytest.raises(ValueError, match=f"LossNorm.{next(iter(bad))} must be > 0"):
        LossNorm(**fields)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_each_mode_by_hand(mode):
    out = get_aggregation(mode)(VALUES, MASK, NORM)
    assert out.shape == ()
    assert out.item() == pytest.approx(EXPECTED[mode])


@pytest.mark.parametrize("mode", sorted(AGGREGATIONS))
def test_padding_garbage_does_not_leak(mode):
    # values under mask == 0 may be inf/NaN (padding): the result and gradient stay finite
    values = VALUES.clone()
    values[0, 2], values[1, 1] = float("nan"), float("inf")
    leaf = values.clone().requires_grad_(True)
    out = AGGREGATIONS[mode](leaf, MASK.bool(), NORM)
    out.backward()
    assert out.item() == pytest.approx(EXPECTED[mode])
    assert torch.isfinite(leaf.grad).all() and (leaf.grad[MASK == 0] == 0).all()


def test_shape_mismatch_is_clear():
    with pytest.raises(ValueError, match="must both be"):
        get_aggregation("token-mean")(torch.zeros(2, 3), torch.ones(2, 4), NORM)


# ---- micro-batch invariance -------------------------------------------------------------------

B, T = 6, 7
LENGTHS = [(1, 6), (0, 2), (2, 7), (3, 4), (1, 3), (0, 5)]  # [start, end) of each response


def batch():
    """A GRPO batch of 6 sequences in 3 groups with varied prompt/response spans."""
    gen = torch.Generator().manual_seed(0)
    mask = torch.zeros(B, T)
    for i, (s, e) in enumerate(LENGTHS):
        mask[i, s:e] = 1
    old = -torch.rand(B, T, generator=gen) * 3
    theta = (old + 0.3 * torch.randn(B, T, generator=gen)).requires_grad_(True)  # leaf "log-probs"
    ref = old - 0.2 * torch.rand(B, T, generator=gen)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 5, 5, 2, 2])
    return theta, old, ref, rewards, groups, mask


def total_loss(theta, old, ref, adv, mask, norm, cfg):
    """pg + kl_coef * kl + entropy-like term, all through one aggregation (as the trainer composes)."""
    agg = get_aggregation(cfg.loss_agg_mode)
    pg, _ = get_policy_loss(cfg.policy_loss)(theta, old, adv, mask, cfg)
    kl = get_kl_estimator(cfg.kl_estimator)(theta, ref)
    return agg(pg, mask, norm) + cfg.kl_coef * agg(kl, mask, norm) - cfg.entropy_coef * agg(-theta, mask, norm)


def micro_batch_loss_and_grad(mb_size: int, cfg: AlgorithmConfig):
    theta, old, ref, rewards, groups, mask = batch()
    adv = get_advantage_estimator(cfg.advantage)(rewards, groups, mask, cfg)  # on the full batch
    norm = LossNorm.for_batch(mask, cfg.loss_scale_tokens)  # on the full batch
    total = torch.zeros(())
    for lo in range(0, B, mb_size):
        rows = slice(lo, lo + mb_size)
        width = int(mask[rows].nonzero()[:, 1].max()) + 1  # trim padding, as a packed micro-batch would
        part = total_loss(theta[rows, :width], old[rows, :width], ref[rows, :width], adv[rows, :width],
                          mask[rows, :width], norm, cfg)
        part.backward()  # gradient accumulation
        total = total + part.detach()
    return total, theta.grad


@pytest.mark.parametrize("mode", sorted(AGGREGATIONS))
@pytest.mark.parametrize("policy_loss", ["ppo_clip", "vanilla_pg"])
def test_micro_batching_does_not_change_loss_or_gradient(mode, policy_loss):
    cfg = AlgorithmConfig(loss_agg_mode=mode, policy_loss=policy_loss, kl_coef=0.1, entropy_coef=0.01,
                          loss_scale_tokens=8)
    full_loss, full_grad = micro_batch_loss_and_grad(B, cfg)
    assert full_grad.abs().sum() > 0
    for mb in (1, 2, 3):
        loss, grad = micro_batch_loss_and_grad(mb, cfg)
        torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(grad, full_grad, rtol=1e-6, atol=1e-7)


def test_micro_batch_local_norm_would_be_wrong():
    # Contrast: normalising token-mean by each micro-batch's own token count changes the loss.
    theta, old, ref, rewards, groups, mask = batch()
    values = theta.detach()
    agg = get_aggregation("token-mean")
    full = agg(values, mask, LossNorm.for_batch(mask, 1))
    local = sum(agg(values[i : i + 2], mask[i : i + 2], LossNorm.for_batch(mask[i : i + 2], 1)) for i in (0, 2, 4))
    assert not torch.isclose(local, full)
