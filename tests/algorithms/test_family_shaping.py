"""Data-side pieces: DAPO overlong penalty and dynamic sampling, KL in the reward, truncated IS."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl_core.algorithms import (
    apply_tis,
    dynamic_sampling_keep,
    groups_still_needed,
    kl_penalized_rewards,
    overlong_penalty,
    tis_weights,
)
from agentrl_core.errors import ConfigError

# ---- overlong penalty


def test_overlong_penalty_by_hand():
    # L_max 20, L_buf 4, factor 1: free up to 16 tokens; exceed = len - 16 = -6, 0, 1, 2, 4, 6
    # -> min(-exceed/4, 0) = 0, 0, -0.25, -0.5, -1 (cut at L_max), -1.5 (past it, as the formula says)
    p = overlong_penalty(torch.tensor([10, 16, 17, 18, 20, 22]), max_len=20, buffer_len=4, factor=1.0)
    assert p.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.5])
    assert p.dtype == torch.float32
    # factor scales linearly: 17 tokens with factor 0.5 -> -0.125
    assert overlong_penalty(torch.tensor([17]), 20, 4, 0.5).tolist() == [-0.125]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_len": 20, "buffer_len": 0, "factor": 1.0}, "0 < buffer_len <= max_len"),
        ({"max_len": 4, "buffer_len": 8, "factor": 1.0}, "0 < buffer_len <= max_len"),
        ({"max_len": 20, "buffer_len": 4, "factor": -1.0}, "factor must be >= 0"),
    ],
)
def test_overlong_penalty_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        overlong_penalty(torch.tensor([1]), **kwargs)


# ---- dynamic sampling


def test_dynamic_sampling_keeps_groups_with_spread():
    # group 0 all 1 (drop), group 1 {0, 1} (keep), group 2 all 0.5 (drop), group 3 singleton (drop),
    # group 9 {0.2, 0.2, 0.3} (keep: one differs is enough)
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 2.0, 0.2, 0.2, 0.3])
    g = torch.tensor([0, 0, 1, 1, 2, 2, 3, 9, 9, 9])
    keep = dynamic_sampling_keep(r, g)
    assert keep.tolist() == [False, False, True, True, False, False, False, True, True, True]
    # the refill contract: 4 informative groups wanted, 2 kept -> roll out 2 more
    assert groups_still_needed(g[keep], 4) == 2
    assert groups_still_needed(g[keep], 1) == 0
    assert groups_still_needed(torch.tensor([], dtype=torch.long), 3) == 3


def test_dynamic_sampling_edge_cases():
    assert dynamic_sampling_keep(torch.ones(4), torch.tensor([5, 5, 6, 6])).tolist() == [False] * 4  # all equal
    assert dynamic_sampling_keep(torch.tensor([]), torch.tensor([], dtype=torch.long)).tolist() == []
    with pytest.raises(ValueError, match="both be"):
        dynamic_sampling_keep(torch.ones(3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="target_groups"):
        groups_still_needed(torch.tensor([1]), -1)


# ---- KL in the reward

LOGP = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, -0.5, -0.5]])
REF = torch.tensor([[-1.5, -1.0, 0.0], [-1.0, -1.0, -1.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_kl_penalized_rewards_k1_and_k2():
    # k1 = logp - ref: row 0: 0.5 + (-1) = -0.5 (padding ignored, even NaN); row 1: 3 * 0.5 = 1.5
    # beta 0.1: [1 - 0.1 * -0.5, 0 - 0.1 * 1.5] = [1.05, -0.15]
    out = kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP, REF, MASK, beta=0.1)
    assert out.tolist() == pytest.approx([1.05, -0.15])
    # k2 = 0.5 d^2: row 0: 0.5 * (0.25 + 1) = 0.625; row 1: 0.5 * 0.25 * 3 = 0.375 -> [0.9375, -0.0375]
    out = kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP, REF, MASK, beta=0.1, estimator="k2")
    assert out.tolist() == pytest.approx([0.9375, -0.0375])
    # beta 0 leaves rewards unchanged
    assert kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP, REF, MASK, beta=0.0).tolist() == [1.0, 0.0]


def test_kl_penalized_rewards_detached_and_checked():
    logp = LOGP.nan_to_num().requires_grad_(True)
    assert not kl_penalized_rewards(torch.tensor([1.0, 0.0]), logp, REF, MASK, beta=0.1).requires_grad
    with pytest.raises(ConfigError, match="unknown kl_estimator 'k4'; valid: k1, k2, k3"):
        kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP, REF, MASK, beta=0.1, estimator="k4")
    with pytest.raises(ValueError, match="must be \\[B,T\\]"):
        kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP[:, :2], REF, MASK, beta=0.1)
    with pytest.raises(ValueError, match="beta must be >= 0"):
        kl_penalized_rewards(torch.tensor([1.0, 0.0]), LOGP, REF, MASK, beta=-1.0)


# ---- truncated importance sampling


def test_tis_weights_by_hand():
    # old - engine = 0.5, -1, 0, (masked: 30) -> exp = 1.6487, 0.3679, 1 ; cap 1.5 -> 1.5, 0.3679, 1, 0
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0]], requires_grad=True)
    engine = torch.tensor([[-1.5, -1.0, -0.5, -30.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = tis_weights(old, engine, mask, cap=1.5)
    assert w.tolist()[0] == pytest.approx([1.5, math.exp(-1), 1.0, 0.0], rel=1e-6)
    assert not w.requires_grad
    # a large cap leaves the untruncated ratio
    assert tis_weights(old, engine, mask, cap=100.0)[0, 0].item() == pytest.approx(math.exp(0.5), rel=1e-6)


def test_apply_tis_scales_loss_and_gradient():
    # pg = -A * logp with A = 1: d pg / d logp = -1; weighted by w = [1.5, 0.5] -> gradients -1.5, -0.5
    logp = torch.tensor([[-0.2, -0.4]], requires_grad=True)
    w = torch.tensor([[1.5, 0.5]])
    out = apply_tis(-logp, w)
    out.sum().backward()
    assert out.tolist()[0] == pytest.approx([0.3, 0.2])
    assert logp.grad.tolist()[0] == pytest.approx([-1.5, -0.5])


def test_tis_bad_arguments():
    with pytest.raises(ValueError, match="cap must be > 0"):
        tis_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), cap=0.0)
    with pytest.raises(ValueError, match="one shape"):
        tis_weights(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2), cap=2.0)
    with pytest.raises(ValueError, match="one shape"):
        apply_tis(torch.zeros(1, 2), torch.zeros(2, 1))
