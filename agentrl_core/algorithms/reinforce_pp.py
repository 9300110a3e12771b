"""REINFORCE++ advantages and their group-baseline variant: outcome returns, discounted per token, whitened over the batch.

Every estimator is `fn(rewards[B] float, groups[B] long, mask[B,T], cfg) -> [B,T]`, exactly 0 where
mask == 0 (see advantages.py). `cfg.gamma` (default 1.0) is read with getattr, so any object with
the fields works.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.advantages import _check_shapes as check_advantage_inputs
from agentrl_core.algorithms.advantages import float_rewards, group_has_spread, group_stats
from agentrl_core.algorithms.registry import AlgorithmParams, register_advantage_estimator


def discounted_outcome_returns(seq_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per-token return of a reward paid at the LAST response token: G[i,t] = gamma^k[i,t] * r_i.

    k[i,t] = number of response tokens (mask != 0) of row i after position t, so the discount
    counts only the model's tokens: environment/prompt tokens between turns (mask 0) neither
    discount nor reset the return. gamma = 1 gives G[i,t] = r_i on every response token.
    Shapes: seq_rewards [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    on = (mask != 0).to(seq_rewards.dtype)
    after = on.flip(-1).cumsum(-1).flip(-1) - on  # response tokens strictly after t
    returns = seq_rewards[:, None] * torch.pow(torch.as_tensor(gamma, dtype=on.dtype), after)
    return torch.where(mask != 0, returns, returns.new_zeros(()))


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / (std + eps) over the tokens where mask != 0 of the WHOLE batch; 0 elsewhere.

    mean = sum(x m) / N; std unbiased = sqrt(sum((x - mean)^2 m) / (N - 1)), taken as 0 for N <= 1.
    Exactly 0 everywhere when the masked values are all equal (or N <= 1): computed, x - mean would be
    the rounding error of the mean, and dividing it by a std of the same size fakes a signal (4x7 tokens
    of 0.1 in float32 gave +0.0147). verl's masked_whiten is the same up to the eps placement (it uses
    (x - mean) * rsqrt(var + 1e-8)) and that guard (it returns the noise, damped by the 1e-8 floor).
    Shapes: [B,T], [B,T] -> [B,T].
    """
    on = mask != 0
    if not bool((values[on].amax() > values[on].amin()) if on.any() else False):
        return torch.zeros_like(values)
    n = on.sum()
    x = torch.where(on, values, values.new_zeros(()))
    mean = x.sum() / n.clamp(min=1)
    centred = torch.where(on, values - mean, values.new_zeros(()))
    std = (centred.pow(2).sum() / (n - 1).clamp(min=1)).sqrt()
    return centred / (std + eps)


@register_advantage_estimator("reinforce_pp", baseline="batch")
def reinforce_pp_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """REINFORCE++: discounted outcome returns, whitened over every response token of the batch.

    G[i,t] = gamma^k[i,t] * r_i (see `discounted_outcome_returns`; gamma = cfg.gamma, default 1)
    A[i,t] = (G[i,t] - mean(G)) / (std(G) + cfg.epsilon), mean/std over all tokens with mask != 0.
    Groups are ignored: the baseline is the batch's. The statistics are per TOKEN, so pass the real
    response mask (a [B,1] mask of ones would weigh every sequence the same instead).
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    check_advantage_inputs(rewards, groups, mask)
    returns = discounted_outcome_returns(float_rewards(rewards), mask, float(getattr(cfg, "gamma", 1.0)))
    return masked_whiten(returns, mask, cfg.epsilon)


@register_advantage_estimator("reinforce_pp_baseline", baseline="group")
def reinforce_pp_baseline_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """REINFORCE++-baseline: subtract the group mean of the rewards, then as REINFORCE++.

    A[i,t] = whiten_S(gamma^k[i,t] * (r_i - mean_g)) for the samples of groups with spread (S: the whitening's
    mean and std over their response tokens only); A = 0 exactly for a group without spread (one sample, or all
    rewards equal). With gamma = 1 (default) and every group with spread this is verl's
    "reinforce_plus_plus_baseline". verl whitens over the whole batch, so there a group without signal (its
    centred reward 0, or r_i for a lone sample) gets -mean/std, a push that depends on the other groups.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    check_advantage_inputs(rewards, groups, mask)
    spread = group_has_spread(rewards, groups)
    centred = torch.where(spread, float_rewards(rewards) - group_stats(rewards, groups).mean, 0.0)
    returns = discounted_outcome_returns(centred, mask, float(getattr(cfg, "gamma", 1.0)))
    return masked_whiten(returns, (mask != 0) & spread[:, None], cfg.epsilon)
