"""Advantage estimators: hand-computed GRPO/RLOO values and a loop reference vs the vectorised code."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl_core.algorithms import ADVANTAGE_ESTIMATORS, group_stats, grpo_advantage, rloo_advantage
from agentrl_core.config import AlgorithmConfig

STD = AlgorithmConfig()  # norm_adv_by_std=True, epsilon=1e-6
NO_STD = AlgorithmConfig(norm_adv_by_std=False)
R2 = 1 / math.sqrt(2)  # 0.70710678


def seq_adv(fn, rewards, groups, cfg):
    """Call an estimator with a one-token mask and return the per-sequence advantages [B]."""
    r = torch.tensor(rewards, dtype=torch.float32)
    g = torch.tensor(groups, dtype=torch.long)
    return fn(r, g, torch.ones(len(rewards), 1), cfg)[:, 0]


def reference_grpo(rewards: torch.Tensor, groups: torch.Tensor, cfg: AlgorithmConfig) -> torch.Tensor:
    """Readable loop version: group by id, torch.std (unbiased), singleton -> 0."""
    out = torch.zeros_like(rewards)
    for gid in groups.unique():
        idx = (groups == gid).nonzero().flatten()
        r = rewards[idx]
        if len(idx) == 1:
            continue
        centred = r - r.mean()
        out[idx] = centred / (r.std() + cfg.epsilon) if cfg.norm_adv_by_std else centred
    return out


def reference_rloo(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Readable loop version: r_i minus the mean of the others in its group, singleton -> 0."""
    out = torch.zeros_like(rewards)
    for i in range(len(rewards)):
        others = [j for j in range(len(rewards)) if j != i and groups[j] == groups[i]]
        if others:
            out[i] = rewards[i] - rewards[others].mean()
    return out


def test_grpo_two_groups_with_std():
    # group 0: r = [1, 0], mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.7071 -> A = +-0.5/0.7071 = +-0.7071
    # group 1: r = [1, 1], mean 1, std 0 -> A = 0 / eps = 0
    adv = seq_adv(grpo_advantage, [1, 0, 1, 1], [0, 0, 1, 1], STD)
    torch.testing.assert_close(adv, torch.tensor([R2, -R2, 0.0, 0.0]), atol=1e-5, rtol=0)


def test_grpo_two_groups_without_std_is_dr_grpo():
    # A = r - mean_g: group 0 -> [0.5, -0.5], group 1 -> [0, 0]
    adv = seq_adv(grpo_advantage, [1, 0, 1, 1], [0, 0, 1, 1], NO_STD)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_grpo_group_of_three():
    # r = [1, 0, 0]: mean 1/3, deviations [2/3, -1/3, -1/3], sum sq 6/9, var (6/9)/2 = 1/3, std 0.57735
    # A = [0.6667/0.57735, -0.3333/0.57735, same] = [1.1547, -0.57735, -0.57735]
    adv = seq_adv(grpo_advantage, [1, 0, 0], [7, 7, 7], STD)
    torch.testing.assert_close(adv, torch.tensor([1.1547005, -0.5773503, -0.5773503]), atol=1e-5, rtol=0)


def test_grpo_interleaved_non_contiguous_ids():
    # group 9: r = [1, 0] (positions 0, 2): mean 0.5, std 0.7071 -> [+0.7071, -0.7071]
    # group 4: r = [3, 5] (positions 1, 3): mean 4, std sqrt(2) -> [-0.7071, +0.7071]
    adv = seq_adv(grpo_advantage, [1, 3, 0, 5], [9, 4, 9, 4], STD)
    torch.testing.assert_close(adv, torch.tensor([R2, -R2, -R2, R2]), atol=1e-5, rtol=0)
    adv = seq_adv(grpo_advantage, [1, 3, 0, 5], [9, 4, 9, 4], NO_STD)
    torch.testing.assert_close(adv, torch.tensor([0.5, -1.0, -0.5, 1.0]))


@pytest.mark.parametrize("cfg", [STD, NO_STD])
def test_grpo_size_one_group_gets_zero(cfg):
    # group 0 as above; group 1 holds one sample (r = 1): no relative signal -> 0, not NaN
    adv = seq_adv(grpo_advantage, [1, 0, 1], [0, 0, 1], cfg)
    assert adv[2].item() == 0.0
    assert torch.isfinite(adv).all()


def test_grpo_respects_mask():
    # advantages [0.7071, -0.7071] broadcast over mask != 0, exactly 0 elsewhere
    rewards, groups = torch.tensor([1.0, 0.0]), torch.tensor([3, 3])
    mask = torch.tensor([[0, 1, 1, 0], [1, 0, 1, 1]])
    adv = grpo_advantage(rewards, groups, mask, STD)
    expected = torch.tensor([[0, R2, R2, 0], [-R2, 0, -R2, -R2]])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)
    assert (adv[mask == 0] == 0).all()


def test_rloo_hand_values():
    # group 0: r = [1, 0] -> [1 - 0, 0 - 1] = [1, -1]; group 1: [1, 1] -> [0, 0]
    adv = seq_adv(rloo_advantage, [1, 0, 1, 1], [0, 0, 1, 1], STD)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 0.0, 0.0]))
    # group of three r = [1, 0, 0]: [1 - 0, 0 - 0.5, 0 - 0.5]; singleton group 5 -> 0
    adv = seq_adv(rloo_advantage, [1, 0, 0, 4], [2, 2, 2, 5], STD)
    torch.testing.assert_close(adv, torch.tensor([1.0, -0.5, -0.5, 0.0]))


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_matches_loop_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.rand(23, generator=gen)
    groups = torch.randint(-3, 40, (23,), generator=gen) * 7  # arbitrary, unsorted ids, some singletons
    ones = torch.ones(23, 1)
    for cfg in (STD, NO_STD):
        vectorised = grpo_advantage(rewards, groups, ones, cfg)[:, 0]
        torch.testing.assert_close(vectorised, reference_grpo(rewards, groups, cfg))
    torch.testing.assert_close(rloo_advantage(rewards, groups, ones, STD)[:, 0], reference_rloo(rewards, groups))


def test_group_stats_counts_and_unbiased_std():
    stats = group_stats(torch.tensor([1.0, 3.0, 0.0, 5.0, 2.0]), torch.tensor([9, 4, 9, 4, 1]))
    torch.testing.assert_close(stats.count, torch.tensor([2.0, 2.0, 2.0, 2.0, 1.0]))
    torch.testing.assert_close(stats.mean, torch.tensor([0.5, 4.0, 0.5, 4.0, 2.0]))
    s2 = math.sqrt(2)
    torch.testing.assert_close(stats.std, torch.tensor([R2, s2, R2, s2, 0.0]))


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_integer_rewards_and_empty_batch(name):
    fn = ADVANTAGE_ESTIMATORS[name]
    adv = fn(torch.tensor([1, 0]), torch.tensor([0, 0]), torch.ones(2, 3), STD)
    assert adv.dtype.is_floating_point and adv.shape == (2, 3)
    assert fn(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.ones(0, 4), STD).shape == (0, 4)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_shape_errors_are_clear(name):
    fn = ADVANTAGE_ESTIMATORS[name]
    with pytest.raises(ValueError, match="rewards must be 1-D"):
        fn(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), torch.ones(2, 3), STD)
    with pytest.raises(ValueError, match="groups must have the shape"):
        fn(torch.zeros(2), torch.zeros(3, dtype=torch.long), torch.ones(2, 3), STD)
    with pytest.raises(ValueError, match="mask must be"):
        fn(torch.zeros(2), torch.zeros(2, dtype=torch.long), torch.ones(3, 3), STD)
