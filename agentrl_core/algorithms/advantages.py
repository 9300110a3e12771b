"""Group-relative advantage estimators (GRPO, Dr.GRPO, RLOO) and the helpers every estimator shares.

Every estimator is `fn(rewards[B] float, groups[B] long, mask[B,T], cfg: AlgorithmParams) -> [B,T]`:
`groups[i]` is an arbitrary id (same id = same prompt/task), `mask` marks response tokens; the
sequence-level advantage is broadcast over the tokens where mask != 0 and is exactly 0 elsewhere.

A group without spread (max_g r == min_g r exactly, `group_has_spread`) carries no relative signal:
every group estimator gives its samples A = 0 exactly, whatever the dtype. Computed, r_i - mean_g is
the float rounding error of the mean (8 rewards of 0.3 in float32: mean 0.30000001), and dividing it
by a std of the same size gives |A| up to ~0.3 from noise alone; verl has that defect, we do not.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from agentrl_core.algorithms.registry import AlgorithmParams, register_advantage_estimator


class GroupStats(NamedTuple):
    """Per-sample statistics of the sample's group, each of shape [B]."""

    count: torch.Tensor
    """n_g: how many samples share the group id (float)."""
    mean: torch.Tensor
    """mean_g = sum_{j in g} r_j / n_g."""
    std: torch.Tensor
    """Unbiased std_g = sqrt(sum_{j in g} (r_j - mean_g)^2 / (n_g - 1)); 0 for n_g = 1."""


def _check_shapes(rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B] (one reward per sequence), got shape {tuple(rewards.shape)}")
    if groups.shape != rewards.shape:
        raise ValueError(f"groups must have the shape of rewards {tuple(rewards.shape)}, got {tuple(groups.shape)}")
    if mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(f"mask must be [B={rewards.shape[0]}, T], got shape {tuple(mask.shape)}")


def group_stats(rewards: torch.Tensor, groups: torch.Tensor) -> GroupStats:
    """Count, mean and unbiased std of each sample's group, vectorised over arbitrary group ids.

    Ids need not be contiguous or sorted: `torch.unique(return_inverse=True)` maps them to
    0..G-1, and `index_add_` sums per group, so there is no Python loop over samples.
    """
    r = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    _, inverse = torch.unique(groups, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    count = torch.bincount(inverse, minlength=n_groups).to(r.dtype)
    mean = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, r) / count
    sq_dev = (r - mean[inverse]) ** 2
    sum_sq = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, sq_dev)
    # Bessel's correction like torch.std; a singleton has no spread, so its std is 0 (not NaN).
    std = (sum_sq / (count - 1).clamp(min=1)).sqrt()
    return GroupStats(count[inverse], mean[inverse], std[inverse])


def group_has_spread(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """spread[i] = (max_{j in g(i)} v_j > min_{j in g(i)} v_j), exactly: True for the samples of a group
    whose values are not all equal. Shapes: values [B] float, ids [B] (any ids) -> bool [B].

    The one predicate of "a group with signal": the group estimators zero the others, DAPO's dynamic
    sampling drops them, GiGPO's step groups and the `groups_with_signal` metric count with it. A group
    of one sample has no spread.
    """
    if values.dim() != 1 or ids.shape != values.shape:
        raise ValueError(f"values and ids must both be [B], got {tuple(values.shape)} and {tuple(ids.shape)}")
    _, inverse = torch.unique(ids, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    v = values.to(torch.promote_types(values.dtype, torch.float32))
    high = v.new_full((n_groups,), -torch.inf).scatter_reduce(0, inverse, v, "amax")
    low = v.new_full((n_groups,), torch.inf).scatter_reduce(0, inverse, v, "amin")
    return (high > low)[inverse]


def zero_without_spread(adv: torch.Tensor, rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """adv[i] where sample i's group has spread (`group_has_spread`), exactly 0 elsewhere. [B] x3 -> [B]."""
    return torch.where(group_has_spread(rewards, groups), adv, adv.new_zeros(()))


def float_rewards(rewards: torch.Tensor) -> torch.Tensor:
    """rewards as float32 at least (a float64 input stays float64)."""
    return rewards.to(torch.promote_types(rewards.dtype, torch.float32))


def broadcast_to_tokens(seq_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] -> [B,T]: `out[i,t] = seq_values[i]` where mask[i,t] != 0, else exactly 0."""
    return torch.where(mask != 0, seq_values[:, None], seq_values.new_zeros(()))


@register_advantage_estimator("grpo", baseline="group")
def grpo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """GRPO outcome advantage, broadcast over the response tokens.

    A_i = (r_i - mean_g) / (std_g + cfg.epsilon)   if cfg.norm_adv_by_std (std unbiased)
    A_i =  r_i - mean_g                            otherwise (Dr.GRPO)
    A_i = 0 exactly when g has no spread (all r_j equal, or one sample). Unlike verl, which gives a
    lone sample A = r_i and an all-equal group its rounding noise / (0 + eps), neither carries relative
    signal, so neither contributes a gradient.
    Shapes: rewards [B] float, groups [B] long, mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    centred = rewards.to(stats.mean.dtype) - stats.mean
    adv = centred / (stats.std + cfg.epsilon) if cfg.norm_adv_by_std else centred
    return broadcast_to_tokens(zero_without_spread(adv, rewards, groups), mask)


@register_advantage_estimator("rloo", baseline="group")
def rloo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """REINFORCE leave-one-out advantage, broadcast over the response tokens.

    A_i = r_i - mean_{j in g, j != i} r_j = n_g / (n_g - 1) * (r_i - mean_g);  A_i = 0 exactly when g has
    no spread (n_g = 1, or all r_j equal: verl gives a lone sample A = r_i).
    Shapes: rewards [B] float, groups [B] long, mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    centred = rewards.to(stats.mean.dtype) - stats.mean
    # For n_g = 1 the centred reward is already 0, so clamping the divisor only avoids 0/0.
    adv = centred * stats.count / (stats.count - 1).clamp(min=1)
    return broadcast_to_tokens(zero_without_spread(adv, rewards, groups), mask)


@register_advantage_estimator("drgrpo", baseline="group")
def drgrpo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """Dr.GRPO ("GRPO done right"): A_i = r_i - mean_g, no division by the group std.

    Pair it with `loss_agg_mode: seq-mean-token-sum-norm` (sum over tokens / a constant), the other
    half of the recipe: both remove GRPO's length and difficulty biases. A group without spread
    (one sample, or all rewards equal): A = 0 exactly.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    return broadcast_to_tokens(zero_without_spread(float_rewards(rewards) - stats.mean, rewards, groups), mask)
