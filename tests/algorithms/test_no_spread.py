"""A group whose rewards are all equal carries no relative signal: every group estimator gives it A = 0 exactly.

Computed naively, r_i - mean_g is the rounding error of the mean, and (r - mean)/(std + eps) divides it by a std
of the same size: 8 float32 rewards of 0.3 gave A = +0.0289 each, 16 of 3.7 gave -0.3195. These tests hold the
estimators to 0.0 exactly, in float32 and float64, on the fractional rewards where rounding shows.
"""

from __future__ import annotations

import random

import pytest
import torch

from agentrl_core.algorithms import (
    ADVANTAGE_BASELINES,
    StepBatch,
    StepTurn,
    batch_advantage,
    dynamic_sampling_keep,
    group_has_spread,
    masked_whiten,
)
from agentrl_core.config import AlgorithmConfig

GROUP_ESTIMATORS = sorted(name for name, kind in ADVANTAGE_BASELINES.items() if kind == "group")
# values whose float32 group mean is not exactly the value: (value, group size)
ROUNDING = [(0.3, 8), (3.7, 16), (-0.1, 8), (0.7, 3), (1.1, 5), (-2.9, 7)]


def _batch(rewards: list[float], groups: list[int], dtype: torch.dtype, width: int = 4) -> StepBatch:
    mask = torch.ones(len(rewards), width)
    turns = [[StepTurn(0, width, 0.0, "s0")] for _ in rewards]
    return StepBatch(torch.tensor(rewards, dtype=dtype), torch.tensor(groups), mask, turns)


def test_every_group_estimator_is_checked():
    # the registry decides what is a group estimator, so a new one is covered the day it is registered
    assert {"grpo", "drgrpo", "rloo", "opmd", "reinforce_pp_baseline", "gigpo"} <= set(GROUP_ESTIMATORS)


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value,size", ROUNDING)
def test_all_equal_group_gets_exactly_zero(name, dtype, value, size):
    batch = _batch([value] * size, [7] * size, dtype)
    for cfg in (AlgorithmConfig(), AlgorithmConfig(norm_adv_by_std=False)):
        adv = batch_advantage(name)(batch, cfg)
        assert adv.abs().max().item() == 0.0, (name, dtype, value, adv[:, 0].tolist())


def test_the_defect_is_real_without_the_guard():
    # what the guard prevents: the float32 rounding of the mean divided by a std of the same size
    r = torch.full((8,), 0.3, dtype=torch.float32)
    naive = (r - r.mean()) / (r.std() + 1e-6)
    assert naive.abs().max().item() > 1e-3


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_a_group_with_spread_beside_keeps_its_signal(name):
    # one all-equal group (0.3 x 8) and one with spread: only the first is zeroed, the second is untouched
    rewards = [0.3] * 8 + [0.0, 1.0, 0.0, 1.0]
    batch = _batch(rewards, [1] * 8 + [2] * 4, torch.float32)
    adv = batch_advantage(name)(batch, AlgorithmConfig())[:, 0]
    assert adv[:8].abs().max().item() == 0.0
    assert (adv[8:] != 0).all() and adv[9] > adv[8]


@pytest.mark.parametrize("seed", range(5))
def test_random_all_equal_groups_float32(seed):
    rng = random.Random(seed)
    rewards, groups = [], []
    for g in range(25):
        size = rng.randint(2, 16)
        rewards += [round(rng.uniform(-5, 5), rng.randint(1, 4))] * size
        groups += [g] * size
    for name in GROUP_ESTIMATORS:
        adv = batch_advantage(name)(_batch(rewards, groups, torch.float32), AlgorithmConfig())
        assert adv.abs().max().item() == 0.0, name


@pytest.mark.parametrize("value", [0.1, 0.3, -0.1, 3.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reinforce_pp_whitening_of_equal_returns_is_zero(value, dtype):
    # 4 x 7 tokens all rewarded 0.1 gave +0.0147 everywhere (worst 0.323) before the guard
    mask = torch.ones(4, 7)
    mask[1, 3:] = 0  # a padded row; the masked-out values differ and must not count
    values = torch.full((4, 7), value, dtype=dtype)
    values[1, 3:] = 99.0
    assert masked_whiten(values, mask, 1e-6).abs().max().item() == 0.0
    batch = _batch([value] * 4, [0, 1, 2, 3], dtype, width=7)
    assert batch_advantage("reinforce_pp")(batch, AlgorithmConfig()).abs().max().item() == 0.0


def test_whitening_with_spread_is_unchanged():
    mask = torch.ones(2, 3)
    out = masked_whiten(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), mask, 0.0)
    ref = (torch.arange(1.0, 7.0) - 3.5) / torch.arange(1.0, 7.0).std()
    torch.testing.assert_close(out.flatten(), ref)


def test_one_predicate_for_spread():
    # dynamic sampling keeps exactly the samples the estimators do not zero, and a singleton has no spread
    r = torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0, 5.0], dtype=torch.float32)
    g = torch.tensor([4, 4, 4, 9, 9, 2])
    assert group_has_spread(r, g).tolist() == [False, False, False, True, True, False]
    assert torch.equal(dynamic_sampling_keep(r, g), group_has_spread(r, g))
    adv = batch_advantage("grpo")(_batch(r.tolist(), g.tolist(), torch.float32), AlgorithmConfig())[:, 0]
    assert ((adv != 0) == group_has_spread(r, g)).all()
    with pytest.raises(ValueError, match=r"\[B\]"):
        group_has_spread(r, g[:3])


def test_reinforce_pp_baseline_keeps_groups_without_spread_at_zero_in_a_mixed_batch():
    # rows of different lengths: whitening over the whole batch (verl) would shift the all-equal group's zeros
    # to -mean/std (0.42 here); they are left out of the statistics and stay 0, the other group is whitened alone
    r = torch.tensor([0.3, 0.3, 0.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    m = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    adv = batch_advantage("reinforce_pp_baseline")(StepBatch(r, g, m, [[], [], [], []]), AlgorithmConfig())
    assert adv[:2].abs().max().item() == 0.0
    centred = torch.tensor([[-0.5] * 4, [0.5, 0, 0, 0]])
    torch.testing.assert_close(adv[2:], masked_whiten(centred, m[2:], AlgorithmConfig().epsilon))
