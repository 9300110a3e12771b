"""Policy-loss family: OPMD (no ratio, no clip), GSPO (sequence ratio, per-token gradient) and RAFT."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agentrl_core.algorithms import (
    POLICY_LOSSES,
    LossNorm,
    get_aggregation,
    get_policy_loss,
    gspo_loss,
    opmd_loss,
    raft_loss,
    sequence_log_ratio,
)
from agentrl_core.config import AlgorithmConfig
from agentrl_core.errors import ConfigError

NEW = ("gspo", "opmd", "raft")


def cfg(**extra):
    return SimpleNamespace(**{**AlgorithmConfig().model_dump(), **extra})


def test_registered_and_unknown_lists_them():
    for name in NEW:
        assert get_policy_loss(name) is POLICY_LOSSES[name]
    with pytest.raises(
        ConfigError, match=r"unknown policy_loss 'gspo_token'; valid: gspo, opmd, ppo_clip, raft, vanilla_pg"
    ):
        get_policy_loss("gspo_token")


@pytest.mark.parametrize("name", NEW)
def test_contract_with_inf_padding(name):
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]])
    logp = -torch.rand(3, 4, generator=torch.Generator().manual_seed(0)) - 0.1
    logp[mask == 0] = float("-inf")  # padding may hold anything
    logp.requires_grad_(True)
    old = logp.detach() - 0.05
    loss, stats = POLICY_LOSSES[name](
        logp, old, torch.randn(3, 4, generator=torch.Generator().manual_seed(1)), mask, cfg()
    )
    assert loss.shape == mask.shape and (loss[mask == 0] == 0).all() and torch.isfinite(loss).all()
    assert {"ratio", "ppo_kl"} <= set(stats)
    for key, stat in stats.items():
        assert stat.shape == mask.shape and not stat.requires_grad and (stat[mask == 0] == 0).all(), key
    loss.sum().backward()
    assert torch.isfinite(logp.grad).all() and (logp.grad[mask == 0] == 0).all()


# ---- OPMD


@pytest.mark.parametrize("ratio", [1.0, 5.0, 0.1])
def test_opmd_no_ratio_no_clip(ratio):
    # tau = 1: l = -A logp / 2 = -2 * -0.5 / 2 = 0.5; d l / d logp = -A / (1 + tau) = -1, whatever the
    # ratio to old_logp (a PPO clip would zero the gradient at ratio 5 with A > 0).
    logp = torch.tensor([[-0.5]], requires_grad=True)
    loss, stats = opmd_loss(logp, logp.detach() - math.log(ratio), torch.tensor([[2.0]]), torch.ones(1, 1), cfg())
    loss.sum().backward()
    assert loss.item() == pytest.approx(0.5)
    assert logp.grad.item() == pytest.approx(-1.0)
    assert stats["ratio"].item() == pytest.approx(ratio, rel=1e-5)


def test_opmd_reads_tau_and_rejects_bad_tau():
    # tau = 3: l = -(-1) * (-0.8) / 4 = -0.2; gradient -A / 4 = 0.25
    logp = torch.tensor([[-0.8]], requires_grad=True)
    loss, _ = opmd_loss(logp, logp.detach(), torch.tensor([[-1.0]]), torch.ones(1, 1), cfg(opmd_tau=3.0))
    loss.sum().backward()
    assert loss.item() == pytest.approx(-0.2) and logp.grad.item() == pytest.approx(0.25)
    with pytest.raises(ConfigError, match="opmd_tau must be > 0"):
        opmd_loss(logp, logp.detach(), torch.ones(1, 1), torch.ones(1, 1), cfg(opmd_tau=-1.0))


# ---- GSPO

MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
LOG_RATIOS = torch.tensor([[0.1, -0.3, 0.5], [0.4, 0.4, 0.0]])  # row means 0.1 and 0.4


def gspo_inputs(adv_rows):
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    logp = (old + LOG_RATIOS).requires_grad_(True)
    adv = torch.tensor(adv_rows, dtype=torch.float32)[:, None].expand(2, 3) * MASK
    return logp, old, adv


def test_sequence_log_ratio_is_masked_mean():
    # (0.1 - 0.3 + 0.5)/3 = 0.1; (0.4 + 0.4)/2 = 0.4, the padded 3rd token ignored even if -inf
    logp, old, _ = gspo_inputs([1.0, 1.0])
    lp = logp.detach().clone()
    lp[1, 2] = float("-inf")
    assert sequence_log_ratio(lp, old, MASK).tolist() == pytest.approx([0.1, 0.4])


def test_gspo_values_clip_and_per_token_gradient():
    # row 0: s = e^0.1 = 1.1051709 in [0.8, 1.2], A = 1 -> l = -1.1051709 on each token, d l/d logp_t = -A s = -1.1051709
    # row 1: s = e^0.4 = 1.4918247 > 1.2, A = 1 -> l1 = -1.4918, l2 = -1.2, max = -1.2 (clipped, gradient 0)
    logp, old, adv = gspo_inputs([1.0, 1.0])
    loss, stats = gspo_loss(logp, old, adv, MASK, cfg())
    loss.sum().backward()
    s0, s1 = math.exp(0.1), math.exp(0.4)
    torch.testing.assert_close(loss, torch.tensor([[-s0, -s0, -s0], [-1.2, -1.2, 0.0]]))
    torch.testing.assert_close(logp.grad, torch.tensor([[-s0, -s0, -s0], [0.0, 0.0, 0.0]]))
    assert stats["clipfrac"].tolist() == [[0, 0, 0], [1, 1, 0]]  # the whole sequence is clipped or none
    torch.testing.assert_close(stats["seq_ratio"], torch.tensor([[s0, s0, s0], [s1, s1, 0.0]]))
    torch.testing.assert_close(stats["ratio"], torch.exp(LOG_RATIOS) * MASK)  # per-token ratios for logging


def test_gspo_negative_advantage_not_clipped_above():
    # A = -1, s = e^0.4: l1 = 1.4918, l2 = 1.2 -> max = l1 (unclipped), gradient -A s = +1.4918247
    logp, old, adv = gspo_inputs([0.0, -1.0])
    loss, stats = gspo_loss(logp, old, adv, MASK, cfg())
    loss.sum().backward()
    s1 = math.exp(0.4)
    torch.testing.assert_close(logp.grad[1], torch.tensor([s1, s1, 0.0]))
    assert stats["clipfrac"][1].tolist() == [0, 0, 0]


def test_gspo_seq_mean_token_mean_equals_sequence_objective():
    # seq-mean-token-mean of GSPO's per-token loss = mean_i(-A_i s_i) in value AND gradient:
    # d/d logp_t of -A exp(mean_t(logp - old)) = -A s / |y|, e.g. row 0: -0.5 * 1.1051709 / 3 / 2 rows
    logp, old, adv = gspo_inputs([0.5, -2.0])
    loss, _ = gspo_loss(logp, old, adv, MASK, cfg())
    agg = get_aggregation("seq-mean-token-mean")(loss, MASK, LossNorm.for_batch(MASK, 3))
    agg.backward()
    grad_ours = logp.grad.clone()
    ref_logp = logp.detach().clone().requires_grad_(True)
    s = torch.exp(((ref_logp - old) * MASK).sum(-1) / MASK.sum(-1))
    ref = (-torch.tensor([0.5, -2.0]) * s).mean()
    ref.backward()
    assert agg.item() == pytest.approx(ref.item(), rel=1e-6)
    torch.testing.assert_close(grad_ours, ref_logp.grad * MASK)
    assert grad_ours[0, 0].item() == pytest.approx(-0.5 * math.exp(0.1) / 3 / 2, rel=1e-6)


def test_gspo_paper_epsilons():
    # clip_ratio_low 3e-4, high 4e-4: s = e^0.001 = 1.0010005 > 1.0004 -> A = 1 clipped to -1.0004, no gradient;
    # s = e^-0.0002 = 0.9998 in [0.9997, 1.0004] -> unclipped, gradient -s
    c = cfg(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    logp = (old + torch.tensor([[0.001, 0.001], [-0.0002, -0.0002]])).requires_grad_(True)
    loss, stats = gspo_loss(logp, old, torch.ones(2, 2), torch.ones(2, 2), c)
    loss.sum().backward()
    assert loss[0].tolist() == pytest.approx([-1.0004, -1.0004], rel=1e-6)
    assert logp.grad[0].tolist() == [0.0, 0.0] and stats["clipfrac"].tolist() == [[1, 1], [0, 0]]
    assert logp.grad[1].tolist() == pytest.approx([-math.exp(-0.0002)] * 2, rel=1e-6)


def test_gspo_huge_ratio_is_capped_without_gradient():
    # mean log-ratio 50 is capped at 10 before exp: s = e^10, finite; A < 0 so not clipped. The cap acts with
    # its gradient (as verl): past it the sequence gets none (agentrl used to keep -A*e^10 = 22026 per token)
    old = torch.full((1, 2), -50.5)
    logp = torch.full((1, 2), -0.5, requires_grad=True)
    loss, _ = gspo_loss(logp, old, -torch.ones(1, 2), torch.ones(1, 2), cfg())
    loss.sum().backward()
    assert loss[0].tolist() == pytest.approx([math.exp(10)] * 2, rel=1e-5)
    assert logp.grad.tolist() == [[0.0, 0.0]]


def test_gspo_just_below_the_cap_keeps_its_gradient():
    # log s = 9.5 < 10: l = -A s per token, d l / d logp_t = -A s = e^9.5 (A = -1), token-sum
    old = torch.full((1, 2), -10.0)
    logp = torch.full((1, 2), -0.5, requires_grad=True)
    loss, _ = gspo_loss(logp, old, -torch.ones(1, 2), torch.ones(1, 2), cfg())
    loss.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([math.exp(9.5)] * 2, rel=1e-5)


def test_gspo_sequence_ratio_averages_raw_token_log_ratios():
    # log-ratios [-25, 0, 0, 0, 0]: the GSPO formula (and verl) give log s = -5, s = e^-5 = 0.0067; clamping each
    # token to -20 first gave e^-4. A = +1, token-sum gradient per token = -A s = -e^-5 (unclipped? s < 0.8:
    # A > 0 and s below 1 - eps: l1 = -s > l2 = -0.8, so max = l1, unclipped)
    old = torch.tensor([[0.0, -1.0, -1.0, -1.0, -1.0]])
    logp = (old + torch.tensor([[-25.0, 0.0, 0.0, 0.0, 0.0]])).requires_grad_(True)
    mask = torch.ones(1, 5)
    assert sequence_log_ratio(logp.detach(), old, mask).tolist() == pytest.approx([-5.0])
    loss, stats = gspo_loss(logp, old, torch.ones(1, 5), mask, cfg())
    loss.sum().backward()
    assert stats["seq_ratio"][0, 0].item() == pytest.approx(math.exp(-5), rel=1e-6)
    assert logp.grad[0].tolist() == pytest.approx([-math.exp(-5)] * 5, rel=1e-5)


# ---- RAFT


def test_raft_is_sft_on_kept_samples():
    # A = [1, 0]: l = -logp on the kept row (0.7, 0.2), 0 on the dropped one; gradients -1 and 0
    logp = torch.tensor([[-0.7, -0.2], [-1.0, -3.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    loss, _ = raft_loss(logp, logp.detach(), adv, torch.ones(2, 2), cfg())
    loss.sum().backward()
    torch.testing.assert_close(loss, torch.tensor([[0.7, 0.2], [0.0, 0.0]]))
    assert logp.grad.tolist() == [[-1.0, -1.0], [0.0, 0.0]]
