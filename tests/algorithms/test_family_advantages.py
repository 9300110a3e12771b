"""Advantage family: Dr.GRPO, REINFORCE++ (+baseline), OPMD, RAFT, R3L by hand, with mask edge cases."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agentrl_core.algorithms import (
    ADVANTAGE_ESTIMATORS,
    discounted_outcome_returns,
    drgrpo_advantage,
    get_advantage_estimator,
    masked_whiten,
    opmd_advantage,
    r3l_advantage,
    r3l_advantages,
    raft_advantage,
    raft_select,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
)
from agentrl_core.config import AlgorithmConfig
from agentrl_core.errors import ConfigError

NEW = ("drgrpo", "reinforce_pp", "reinforce_pp_baseline", "opmd", "raft", "r3l")


def cfg(**extra):
    """AlgorithmConfig's fields plus options it does not have yet (read with getattr by the code)."""
    return SimpleNamespace(**{**AlgorithmConfig().model_dump(), **extra})


def close(actual: torch.Tensor, expected, rtol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), rtol=rtol, atol=1e-6)


def seq_adv(fn, rewards, groups, c):
    """Per-sequence advantages [B] through a one-token mask."""
    r = torch.tensor(rewards, dtype=torch.float32)
    return fn(r, torch.tensor(groups), torch.ones(len(rewards), 1), c)[:, 0]


def test_new_estimators_registered_and_unknown_lists_them():
    for name in NEW:
        assert get_advantage_estimator(name) is ADVANTAGE_ESTIMATORS[name]
    with pytest.raises(ConfigError) as info:
        get_advantage_estimator("reinforce++")
    assert "valid: drgrpo, grpo, opmd, r3l, raft, reinforce_pp, reinforce_pp_baseline, rloo" in str(info.value)


@pytest.mark.parametrize("name", NEW)
def test_contract_mask_zero_and_finite(name):
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0]])
    r = torch.tensor([1.0, 0.0, 0.5, 1.0])
    adv = ADVANTAGE_ESTIMATORS[name](r, torch.tensor([4, 4, 1, 9]), mask, cfg())
    assert adv.shape == mask.shape and torch.isfinite(adv).all()
    assert (adv[mask == 0] == 0).all()


# ---- Dr.GRPO


def test_drgrpo_no_std_and_singleton():
    # group 7: mean (1 + 0)/2 = 0.5 -> [0.5, -0.5]; group 3: mean (0.5 + 2)/2 = 1.25 -> [-0.75, 0.75];
    # group 1 is a singleton -> 0. No division by std (GRPO would give +-0.7071 for group 7).
    adv = seq_adv(drgrpo_advantage, [1.0, 0.0, 0.5, 2.0, 5.0], [7, 7, 3, 3, 1], cfg())
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.75, 0.75, 0.0])


def test_drgrpo_broadcast_over_mask():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    adv = drgrpo_advantage(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, cfg())
    assert adv.tolist() == [[0.5, 0.5, 0.0], [0.0, -0.5, -0.5]]


# ---- REINFORCE++


def test_discounted_returns_count_only_response_tokens():
    # row 0, r = 1, mask [1,0,1,1]: response tokens after t: t0 -> 2, t2 -> 1, t3 -> 0 => 0.25, 0.5, 1
    # (the masked t1 neither discounts nor resets); row 1, r = 2, mask [1,1,0,0]: 2*0.5, 2 => 1, 2.
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]])
    g = discounted_outcome_returns(torch.tensor([1.0, 2.0]), mask, gamma=0.5)
    assert g.tolist() == [[0.25, 0.0, 0.5, 1.0], [1.0, 2.0, 0.0, 0.0]]
    # gamma = 1: every response token carries the sequence reward
    assert discounted_outcome_returns(torch.tensor([1.0, 2.0]), mask, 1.0).tolist() == [[1, 0, 1, 1], [2, 2, 0, 0]]


def test_reinforce_pp_gamma_one_whitened_over_tokens():
    # tokens' returns: row 0 (r=1, 2 tokens) 1, 1; row 1 (r=0, 3 tokens) 0, 0, 0. N = 5, mean 0.4,
    # centred 0.6 x2, -0.4 x3; sum sq = 0.72 + 0.48 = 1.2; unbiased var 1.2/4 = 0.3, std 0.5477226
    # => 0.6/0.5477226 = 1.0954451, -0.4/0.5477226 = -0.7302967. Weighted by TOKENS, not sequences.
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = reinforce_pp_advantage(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), mask, cfg())
    a, b = 1.0954451, -0.7302967
    close(adv, [[a, a, 0.0], [b, b, b]])
    assert adv[mask != 0].sum().item() == pytest.approx(0.0, abs=1e-6)


def test_reinforce_pp_reads_gamma():
    # returns from the discounted test: 0.25, 0.5, 1 | 1, 2; sum 4.75, mean 0.95;
    # centred -0.7, -0.45, 0.05 | 0.05, 1.05; sum sq 0.49 + 0.2025 + 0.0025 + 0.0025 + 1.1025 = 1.8;
    # var 1.8/4 = 0.45, std 0.6708204
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]])
    adv = reinforce_pp_advantage(torch.tensor([1.0, 2.0]), torch.tensor([0, 0]), mask, cfg(gamma=0.5))
    s = math.sqrt(0.45)
    expected = [[-0.7 / s, 0.0, -0.45 / s, 0.05 / s], [0.05 / s, 1.05 / s, 0.0, 0.0]]
    close(adv, expected)


def test_reinforce_pp_default_gamma_is_one():
    c = cfg()
    assert getattr(c, "gamma", 1.0) == 1.0
    mask = torch.ones(2, 3)
    adv = reinforce_pp_advantage(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, c)
    assert (adv[0] == adv[0, 0]).all() and (adv[1] == adv[1, 0]).all()  # constant per row


def test_reinforce_pp_degenerate_cases_are_zero_not_nan():
    # all-equal rewards: nothing to whiten; a single response token: std taken as 0 -> 0
    assert (reinforce_pp_advantage(torch.tensor([1.0, 1.0]), torch.tensor([0, 1]), torch.ones(2, 3), cfg()) == 0).all()
    one = torch.tensor([[0, 1, 0], [0, 0, 0]])
    assert reinforce_pp_advantage(torch.tensor([3.0, 1.0]), torch.tensor([0, 1]), one, cfg()).abs().sum() == 0
    assert masked_whiten(torch.full((2, 2), float("inf")), torch.zeros(2, 2), 1e-6).tolist() == [[0, 0], [0, 0]]


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    # groups {0: [1, 0]} -> centred 0.5, -0.5; {1: [1, 1]} has no spread: 0, and left out of the whitening.
    # Tokens of group 0 (2 each): 0.5 x2, -0.5 x2; mean 0, sum sq 1, var 1/3, std 0.5773503 => +-0.8660254
    adv = reinforce_pp_baseline_advantage(
        torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), torch.ones(4, 2), cfg()
    )
    a = 0.8660254
    close(adv, [[a, a], [-a, -a], [0.0, 0.0], [0.0, 0.0]])
    # a singleton's centred reward is 0 before whitening: a lone success gets nothing
    lone = reinforce_pp_baseline_advantage(
        torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 5]), torch.ones(3, 1), cfg()
    )
    assert lone[2, 0].item() == 0.0


# ---- OPMD


def test_opmd_mean_baseline_is_drgrpo():
    r, g = [1.0, 0.0, 0.5, 2.0, 5.0], [7, 7, 3, 3, 1]
    assert seq_adv(opmd_advantage, r, g, cfg()).tolist() == pytest.approx([0.5, -0.5, -0.75, 0.75, 0.0])
    assert seq_adv(opmd_advantage, r, g, cfg(opmd_baseline="mean")).tolist() == pytest.approx(
        [0.5, -0.5, -0.75, 0.75, 0.0]
    )


def test_opmd_logavgexp_baseline():
    # tau = 1, group [0, ln 3]: mean exp = (1 + 3)/2 = 2 -> baseline ln 2 => A = [-ln 2, ln 3 - ln 2 = ln 1.5]
    adv = seq_adv(opmd_advantage, [0.0, math.log(3)], [0, 0], cfg(opmd_baseline="logavgexp"))
    assert adv.tolist() == pytest.approx([-math.log(2), math.log(1.5)], rel=1e-6)
    # tau = 0.5, group [0, 1]: 0.5 * ln((1 + e^2)/2) = 0.5 * ln(4.1945280) = 0.7168904 => A = [-0.7168904, 0.2831096]
    adv = seq_adv(opmd_advantage, [0.0, 1.0], [0, 0], cfg(opmd_baseline="logavgexp", opmd_tau=0.5))
    assert adv.tolist() == pytest.approx([-0.7168904, 0.2831096], rel=1e-6)


def test_opmd_logavgexp_stable_for_small_tau_and_singleton():
    # tau = 0.01, [0, 1]: 0.01 * (100 + ln(0.5 * (1 + e^-100))) = 1 - 0.01 ln 2 = 0.9930685 (exp(100) would overflow float32)
    c = cfg(opmd_baseline="logavgexp", opmd_tau=0.01)
    adv = seq_adv(opmd_advantage, [0.0, 1.0, 4.0], [0, 0, 2], c)
    assert adv.tolist() == pytest.approx([-0.9930685, 0.0069315, 0.0], abs=1e-5)  # singleton -> 0


def test_opmd_bad_options_fail_clearly():
    with pytest.raises(ConfigError, match="unknown algorithm.opmd_baseline 'max'; valid: logavgexp, mean"):
        seq_adv(opmd_advantage, [1.0, 0.0], [0, 0], cfg(opmd_baseline="max"))
    with pytest.raises(ConfigError, match="opmd_tau must be > 0"):
        seq_adv(opmd_advantage, [1.0, 0.0], [0, 0], cfg(opmd_baseline="logavgexp", opmd_tau=0.0))


# ---- RAFT and R3L


def test_raft_select_and_advantage():
    r = torch.tensor([1.0, 0.5, 1.2, 0.999])
    assert raft_select(r, 1.0).tolist() == [True, False, True, False]
    assert seq_adv(raft_advantage, r.tolist(), [0, 0, 1, 1], cfg()).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert seq_adv(raft_advantage, r.tolist(), [0, 0, 1, 1], cfg(success_threshold=0.5)).tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="1-D"):
        raft_select(torch.ones(2, 2), 1.0)


def test_r3l_transform_each_branch():
    # success -> 1.0 (whatever A); not success: A >= 0 -> 3A (0.2 -> 0.6, 0 -> 0); A < 0 unchanged
    adv = torch.tensor([0.5, 0.2, -0.3, 0.0, -0.5])
    success = torch.tensor([True, False, False, False, True])
    assert r3l_advantages(adv, success).tolist() == pytest.approx([1.0, 0.6, -0.3, 0.0, 1.0])
    assert r3l_advantages(adv, success, amplify=2.0).tolist() == pytest.approx([1.0, 0.4, -0.3, 0.0, 1.0])
    with pytest.raises(ValueError, match="both be"):
        r3l_advantages(adv, success[:2])


def test_r3l_estimator_on_opmd_baseline():
    # one group [1, 0, 0, 0.5]: mean 0.375 -> A = [0.625, -0.375, -0.375, 0.125];
    # success (r >= 1) only the first -> 1.0; 0.125 >= 0 -> x3 = 0.375; negatives unchanged
    adv = seq_adv(r3l_advantage, [1.0, 0.0, 0.0, 0.5], [0, 0, 0, 0], cfg())
    assert adv.tolist() == pytest.approx([1.0, -0.375, -0.375, 0.375])
    adv = seq_adv(r3l_advantage, [1.0, 0.0, 0.0, 0.5], [0, 0, 0, 0], cfg(r3l_amplify=1.0, success_threshold=2.0))
    assert adv.tolist() == pytest.approx([0.625, -0.375, -0.375, 0.125])  # amplify 1, nobody succeeded
