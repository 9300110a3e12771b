"""Group-relative advantage estimators (GRPO, Dr.GRPO, RLOO) and the helpers every estimator shares.

Every estimator is `fn(rewards[B] float, groups[B] long, mask[B,T], cfg: AlgorithmParams) -> [B,T]`:
`groups[i]` is an arbitrary id (same id = same prompt/task), `mask` marks response tokens; the
sequence-level advantage is broadcast over the tokens where mask != 0 and is exactly 0 elsewhere.
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
    A group of one sample gets A = 0 (r_i = mean_g). Unlike verl, which gives such a sample
    A = r_i, a lone sample carries no relative signal, so it contributes no gradient.
    Shapes: rewards [B] float, groups [B] long, mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    centred = rewards.to(stats.mean.dtype) - stats.mean
    adv = centred / (stats.std + cfg.epsilon) if cfg.norm_adv_by_std else centred
    return broadcast_to_tokens(adv, mask)


@register_advantage_estimator("rloo", baseline="group")
def rloo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """REINFORCE leave-one-out advantage, broadcast over the response tokens.

    A_i = r_i - mean_{j in g, j != i} r_j = n_g / (n_g - 1) * (r_i - mean_g);  A_i = 0 when n_g = 1.
    Shapes: rewards [B] float, groups [B] long, mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    centred = rewards.to(stats.mean.dtype) - stats.mean
    # For n_g = 1 the centred reward is already 0, so clamping the divisor only avoids 0/0.
    adv = centred * stats.count / (stats.count - 1).clamp(min=1)
    return broadcast_to_tokens(adv, mask)


@register_advantage_estimator("drgrpo", baseline="group")
def drgrpo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """Dr.GRPO ("GRPO done right"): A_i = r_i - mean_g, no division by the group std.

    Pair it with `loss_agg_mode: seq-mean-token-sum-norm` (sum over tokens / a constant), the other
    half of the recipe: both remove GRPO's length and difficulty biases. Singleton group: A = 0.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    return broadcast_to_tokens(float_rewards(rewards) - stats.mean, mask)
