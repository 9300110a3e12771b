"""DAPO's dynamic sampling: drop groups whose rewards are all equal, and say how many to refill.

A group whose samples all got the same reward has advantage 0 under every group baseline, so it
spends compute and dilutes the loss without giving a gradient.

Refill contract for the caller (the rollout loop), to fill a batch of N informative groups:
  1. roll out a generation batch of prompts (n samples each) and compute the rewards;
  2. `keep = dynamic_sampling_keep(rewards, groups)`; keep those samples;
  3. `missing = groups_still_needed(kept_groups_so_far, N)`; while missing > 0, roll out at least
     `missing` more prompts (more, e.g. missing / kept fraction, to need fewer rounds), filter them
     the same way and append, up to a maximum number of generation rounds (DAPO's
     max_num_gen_batches; past it, fail or train on what there is, by the recipe's choice);
  4. truncate to exactly N groups (whole groups: the group baseline needs all of a group's samples).
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.advantages import group_has_spread


def dynamic_sampling_keep(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """keep[i] = (max_{j in g(i)} r_j > min_{j in g(i)} r_j): True for samples of groups with spread.

    Shapes: rewards [B] float, groups [B] long (any ids) -> bool [B]. A singleton group has no
    spread and is dropped; whole groups are kept or dropped together. The predicate is
    `group_has_spread`, the one every group estimator zeroes by, so what is dropped is exactly what
    would have had advantage 0.
    """
    if rewards.dim() != 1 or groups.shape != rewards.shape:
        raise ValueError(f"rewards and groups must both be [B], got {tuple(rewards.shape)} and {tuple(groups.shape)}")
    return group_has_spread(rewards, groups)


def groups_still_needed(kept_groups: torch.Tensor, target_groups: int) -> int:
    """How many more informative groups the caller must roll out: max(0, N - #distinct kept ids).

    `kept_groups` are the group ids of the samples kept so far (any order, repeated per sample).
    """
    if target_groups < 0:
        raise ValueError(f"target_groups must be >= 0, got {target_groups}")
    return max(0, target_groups - int(torch.unique(kept_groups).numel()))
