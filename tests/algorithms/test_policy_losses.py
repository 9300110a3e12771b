"""Policy losses: every branch of dual-clip PPO by hand, its gradients and stats, and vanilla PG."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl_core.algorithms import LossNorm, get_aggregation, ppo_clip_loss, vanilla_pg_loss
from agentrl_core.config import AlgorithmConfig

CFG = AlgorithmConfig()  # clip_ratio_low = clip_ratio_high = 0.2, clip_ratio_c = 3

# One token per case: (ratio, advantage, expected loss, expected d loss / d logp, clipfrac, dual_clipfrac)
CASES = {
    # inside [0.8, 1.2]: l1 = l2 = -2 * 1.1 = -2.2; gradient -A*ratio = -2.2
    "inside": (1.1, 2.0, -2.2, -2.2, 0.0, 0.0),
    # A > 0, ratio 1.5 > 1.2: l1 = -1.5, l2 = -1.2 -> max -1.2 (clipped, no gradient)
    "above_pos_adv": (1.5, 1.0, -1.2, 0.0, 1.0, 0.0),
    # A < 0, ratio 0.5 < 0.8: l1 = 0.5, l2 = 0.8 -> max 0.8 (clipped); cap -A*c = 3 not binding
    "below_neg_adv": (0.5, -1.0, 0.8, 0.0, 1.0, 0.0),
    # A < 0, ratio 5: l1 = 5, l2 = 1.2 -> max 5 (unclipped), then min(5, 3) = 3: the dual-clip cap
    "dual_clip": (5.0, -1.0, 3.0, 0.0, 0.0, 1.0),
    # A < 0, ratio 1.5: l1 = 1.5, l2 = 1.2 -> max 1.5, unclipped: gradient -A*ratio = 1.5
    "above_neg_adv": (1.5, -1.0, 1.5, 1.5, 0.0, 0.0),
    # A > 0, ratio 0.5: l1 = -0.5, l2 = -0.8 -> max -0.5, unclipped: gradient -0.5
    "below_pos_adv": (0.5, 1.0, -0.5, -0.5, 0.0, 0.0),
}


def one_token(ratio: float, adv: float):
    old = torch.tensor([[-1.0]])
    logp = (old + math.log(ratio)).requires_grad_(True)
    return logp, old, torch.tensor([[adv]]), torch.ones(1, 1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ppo_clip_each_branch(case):
    ratio, adv, loss_expected, grad_expected, clipfrac, dual = CASES[case]
    logp, old, a, mask = one_token(ratio, adv)
    loss, stats = ppo_clip_loss(logp, old, a, mask, CFG)
    loss.sum().backward()
    assert loss.item() == pytest.approx(loss_expected, abs=1e-5)
    assert logp.grad.item() == pytest.approx(grad_expected, abs=1e-5)
    assert stats["clipfrac"].item() == clipfrac
    assert stats["dual_clipfrac"].item() == dual
    assert stats["ratio"].item() == pytest.approx(ratio, rel=1e-5)
    assert stats["ppo_kl"].item() == pytest.approx(-math.log(ratio), abs=1e-5)


def test_ppo_clip_batched_stats_and_clipfrac_mean():
    # All six cases in one [1, 6] row plus a padded token holding garbage.
    ratios, advs = zip(*[(c[0], c[1]) for c in CASES.values()])
    old = torch.full((1, 7), -1.0)
    logp = old + torch.log(torch.tensor([list(ratios) + [1.0]]))
    logp[0, 6] = float("-inf")  # padding: must not leak into loss or stats
    a = torch.tensor([list(advs) + [1.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    loss, stats = ppo_clip_loss(logp, old, a, mask, CFG)
    torch.testing.assert_close(loss[0, :6], torch.tensor([c[2] for c in CASES.values()]), atol=1e-5, rtol=0)
    assert loss[0, 6].item() == 0.0
    for name, stat in stats.items():
        assert stat.shape == (1, 7) and stat[0, 6].item() == 0.0 and torch.isfinite(stat).all(), name
        assert not stat.requires_grad
    # clipfrac: 2 of 6 tokens clipped (above_pos_adv, below_neg_adv); dual: 1 of 6
    token_mean, norm = get_aggregation("token-mean"), LossNorm.for_batch(mask, 1)
    assert token_mean(stats["clipfrac"], mask, norm).item() == pytest.approx(2 / 6)
    assert token_mean(stats["dual_clipfrac"], mask, norm).item() == pytest.approx(1 / 6)


def test_ppo_clip_asymmetric_clip_higher():
    # DAPO clip-higher: eps_high 0.28, A = 1, ratio 1.5 -> l2 = -1.28; ratio 0.7 with A = -1 -> l2 = 0.8
    cfg = AlgorithmConfig(clip_ratio_high=0.28)
    logp, old, a, mask = one_token(1.5, 1.0)
    assert ppo_clip_loss(logp, old, a, mask, cfg)[0].item() == pytest.approx(-1.28, abs=1e-5)
    logp, old, a, mask = one_token(0.7, -1.0)
    assert ppo_clip_loss(logp, old, a, mask, cfg)[0].item() == pytest.approx(0.8, abs=1e-5)


def test_ppo_clip_clamps_log_ratio():
    # log-ratio 100 is clamped to 20: ratio e^20 is finite; A = 1 -> clipped to -1.2, A = -1 -> cap 3
    old, logp = torch.zeros(1, 2), torch.full((1, 2), 100.0)
    loss, stats = ppo_clip_loss(logp, old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), CFG)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, 3.0]]))
    assert torch.isfinite(stats["ratio"]).all()
    assert stats["ratio"][0, 0].item() == pytest.approx(math.exp(20), rel=1e-5)


def test_vanilla_pg_hand_values():
    # loss = -A * logp: [-(1)(-0.5), -(-2)(-2.0)] = [0.5, -4.0]; d/dlogp = -A = [-1, 2]; masked token -> 0
    logp = torch.tensor([[-0.5, -2.0, -3.0]], requires_grad=True)
    old = torch.tensor([[-0.5, -1.0, -3.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, stats = vanilla_pg_loss(logp, old, torch.tensor([[1.0, -2.0, 5.0]]), mask, CFG)
    torch.testing.assert_close(loss, torch.tensor([[0.5, -4.0, 0.0]]), rtol=0, atol=0)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, 2.0, 0.0]]))
    # ratio exp(0) = 1 and exp(-1) = 0.3679 on the model tokens
    torch.testing.assert_close(stats["ratio"], torch.tensor([[1.0, math.exp(-1.0), 0.0]]))


def test_ppo_on_policy_gradient_equals_vanilla_pg():
    # At ratio 1 nothing is clipped and d(-A*rho)/dlogp = -A = d(-A*logp)/dlogp.
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen) * 3
    adv = torch.randn(3, 4, generator=gen)
    mask = torch.ones(3, 4)
    grads = []
    for fn in (ppo_clip_loss, vanilla_pg_loss):
        logp = old.clone().requires_grad_(True)
        fn(logp, old, adv, mask, CFG)[0].sum().backward()
        grads.append(logp.grad)
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("fn", [ppo_clip_loss, vanilla_pg_loss])
def test_shape_mismatch_is_clear(fn):
    with pytest.raises(ValueError, match="must all be"):
        fn(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), CFG)
