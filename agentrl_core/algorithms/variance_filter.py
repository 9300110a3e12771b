"""RAGEN's variance filter (StarPO-S): train on the groups whose rewards vary most.

A group of samples of one task whose rewards barely differ carries little signal under a group
baseline; at small model sizes, training on every group lets such groups pull the policy toward
repeating itself (RAGEN's "echo trap"). RAGEN keeps, per step, only the share of groups with the
largest reward spread (its `rollout_filter_ratio`, 0.25 in the paper's StarPO-S setting):

    s_g = sqrt(sum_{j in g} (r_j - mean_g)^2 / (n_g - 1))        (`group_stats`; 0 for a singleton)
    k   = max(1, floor(ratio * G + 0.5))                          of the G groups of the step
    keep the k groups of largest s_g, whole groups; equal s_g: the lower group id first.

ratio = 1 keeps every group. Unlike DAPO's dynamic sampling (`dynamic_sampling_keep`: drop groups
with s_g = 0 and roll out more), nothing is refilled: the step trains on fewer groups.
"""

from __future__ import annotations

import math

import torch

from agentrl_core.algorithms.advantages import group_stats


def groups_to_keep(n_groups: int, ratio: float) -> int:
    """k = max(1, floor(ratio * G + 0.5)) for G >= 1 (0 for G = 0); ratio in (0, 1]."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0, got {n_groups}")
    return 0 if n_groups == 0 else max(1, math.floor(ratio * n_groups + 0.5))


def top_variance_keep(rewards: torch.Tensor, groups: torch.Tensor, ratio: float) -> torch.Tensor:
    """keep[i] = sample i's group is among the k groups of largest reward std (module docstring).

    Shapes: rewards [B] float, groups [B] (any ids) -> bool [B]; whole groups are kept or dropped.
    """
    if rewards.dim() != 1 or groups.shape != rewards.shape:
        raise ValueError(f"rewards and groups must both be [B], got {tuple(rewards.shape)} and {tuple(groups.shape)}")
    ids, inverse = torch.unique(groups, return_inverse=True)  # ids ascending: the stable sort breaks ties by id
    if ids.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    per_sample = group_stats(rewards, groups).std
    spread = per_sample.new_zeros(ids.numel()).scatter(0, inverse, per_sample)  # each group's std, in id order
    order = torch.sort(spread, descending=True, stable=True).indices
    chosen = torch.zeros(ids.numel(), dtype=torch.bool)
    chosen[order[: groups_to_keep(ids.numel(), ratio)]] = True
    return chosen[inverse]
