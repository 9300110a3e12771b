"""More advantage estimators: Dr.GRPO, REINFORCE++ (+baseline), OPMD, RAFT and R3L, one signature for all.

Every estimator is `fn(rewards[B] float, groups[B] long, mask[B,T], cfg) -> [B,T]`, exactly 0 where
mask == 0 (see advantages.py). Options not yet in AlgorithmConfig are read with `getattr(cfg, name,
default)`, so any object with the fields works (the defaults are the documented ones):
  gamma             1.0        REINFORCE++ discount per response token
  opmd_baseline     "mean"     OPMD/R3L group baseline: "mean" or "logavgexp"
  opmd_tau          1.0        OPMD temperature tau (> 0), baseline and loss
  success_threshold 1.0        RAFT/R3L: a sample with reward >= this succeeded
  r3l_amplify       3.0        R3L: factor on non-negative advantages of unsuccessful samples
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from agentrl_core.algorithms.advantages import _check_shapes, broadcast_to_tokens, group_stats
from agentrl_core.algorithms.registry import register_advantage_estimator
from agentrl_core.errors import ConfigError

if TYPE_CHECKING:
    from agentrl_core.config import AlgorithmConfig

OPMD_BASELINES = ("logavgexp", "mean")
"""Valid values of `cfg.opmd_baseline`."""


def _float(rewards: torch.Tensor) -> torch.Tensor:
    return rewards.to(torch.promote_types(rewards.dtype, torch.float32))


def _positive(cfg: Any, name: str, default: float) -> float:
    value = float(getattr(cfg, name, default))
    if not value > 0:
        raise ConfigError(f"algorithm.{name} must be > 0, got {value!r}")
    return value


# ---- Dr.GRPO


@register_advantage_estimator("drgrpo")
def drgrpo_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """Dr.GRPO ("GRPO done right"): A_i = r_i - mean_g, no division by the group std.

    Pair it with `loss_agg_mode: seq-mean-token-sum-norm` (sum over tokens / a constant), the other
    half of the recipe: both remove GRPO's length and difficulty biases. Singleton group: A = 0.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    stats = group_stats(rewards, groups)
    return broadcast_to_tokens(_float(rewards) - stats.mean, mask)


# ---- REINFORCE++


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

    mean = sum(x m) / N; std unbiased = sqrt(sum((x - mean)^2 m) / (N - 1)), taken as 0 for N <= 1
    (so one token, or all-equal values, whiten to 0, never NaN). verl's masked_whiten is the same up
    to the eps placement (it uses (x - mean) * rsqrt(var + 1e-8)). Shapes: [B,T], [B,T] -> [B,T].
    """
    on = mask != 0
    n = on.sum()
    x = torch.where(on, values, values.new_zeros(()))
    mean = x.sum() / n.clamp(min=1)
    centred = torch.where(on, values - mean, values.new_zeros(()))
    std = (centred.pow(2).sum() / (n - 1).clamp(min=1)).sqrt()
    return centred / (std + eps)


@register_advantage_estimator("reinforce_pp")
def reinforce_pp_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """REINFORCE++: discounted outcome returns, whitened over every response token of the batch.

    G[i,t] = gamma^k[i,t] * r_i (see `discounted_outcome_returns`; gamma = cfg.gamma, default 1)
    A[i,t] = (G[i,t] - mean(G)) / (std(G) + cfg.epsilon), mean/std over all tokens with mask != 0.
    Groups are ignored: the baseline is the batch's. The statistics are per TOKEN, so pass the real
    response mask (a [B,1] mask of ones would weigh every sequence the same instead).
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    returns = discounted_outcome_returns(_float(rewards), mask, float(getattr(cfg, "gamma", 1.0)))
    return masked_whiten(returns, mask, cfg.epsilon)


@register_advantage_estimator("reinforce_pp_baseline")
def reinforce_pp_baseline_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """REINFORCE++-baseline: subtract the group mean of the rewards, then as REINFORCE++.

    A[i,t] = whiten_batch(gamma^k[i,t] * (r_i - mean_g)); with gamma = 1 (default) this is verl's
    "reinforce_plus_plus_baseline". A singleton group's centred reward is 0 (before whitening).
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    centred = _float(rewards) - group_stats(rewards, groups).mean
    returns = discounted_outcome_returns(centred, mask, float(getattr(cfg, "gamma", 1.0)))
    return masked_whiten(returns, mask, cfg.epsilon)


# ---- OPMD (Trinity-RFT)


def group_logavgexp(values: torch.Tensor, groups: torch.Tensor, tau: float) -> torch.Tensor:
    """Per sample: tau * log(mean_{j in g} exp(v_j / tau)) of its group g. Shapes: [B], [B] -> [B].

    Computed stably around the group max: tau * (max_g + log(sum_j exp(v_j/tau - max_g) / n_g)), with
    max_g = max_j v_j / tau. It lies between mean_g (tau -> inf) and max_g (tau -> 0).
    """
    x = _float(values) / tau
    _, inverse = torch.unique(groups, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    top = torch.full((n_groups,), -math.inf, dtype=x.dtype, device=x.device)
    top = top.scatter_reduce(0, inverse, x, reduce="amax")
    sums = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, inverse, torch.exp(x - top[inverse]))
    counts = torch.bincount(inverse, minlength=n_groups).to(x.dtype)
    return tau * (top + torch.log(sums / counts))[inverse]


def opmd_baseline(rewards: torch.Tensor, groups: torch.Tensor, cfg: Any) -> torch.Tensor:
    """OPMD's group baseline b_i [B]: mean_g (cfg.opmd_baseline = "mean", default) or
    tau * log(mean_g exp(r/tau)) ("logavgexp", tau = cfg.opmd_tau, default 1.0)."""
    kind = getattr(cfg, "opmd_baseline", "mean")
    if kind == "mean":
        return group_stats(rewards, groups).mean
    if kind == "logavgexp":
        return group_logavgexp(rewards, groups, _positive(cfg, "opmd_tau", 1.0))
    raise ConfigError(f"unknown algorithm.opmd_baseline {kind!r}; valid: {', '.join(OPMD_BASELINES)}")


@register_advantage_estimator("opmd")
def opmd_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """OPMD (Trinity-RFT, online policy mirror descent) advantage: A_i = r_i - b_g.

    b_g = mean_g r                              (cfg.opmd_baseline = "mean", default)
    b_g = tau * log(mean_{j in g} exp(r_j/tau))  ("logavgexp", tau = cfg.opmd_tau, default 1.0)
    A singleton group gets A = 0 (both baselines equal r_i). Trinity-RFT uses baseline 0 there
    (A = r_i); like our GRPO, a lone sample carries no relative signal here. Pair with the "opmd" loss.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    return broadcast_to_tokens(_float(rewards) - opmd_baseline(rewards, groups, cfg), mask)


# ---- RAFT


def raft_select(rewards: torch.Tensor, threshold: float) -> torch.Tensor:
    """RAFT's filter: keep[i] = rewards[i] >= threshold (the successful samples). [B] -> bool [B]."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    return rewards >= threshold


@register_advantage_estimator("raft")
def raft_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """RAFT (reward-ranked fine-tuning) weight: A_i = 1 if r_i >= cfg.success_threshold (default 1) else 0.

    With the "raft" policy loss (-A * logp) this is SFT on the successful samples only. Groups are
    ignored. Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    keep = raft_select(rewards, float(getattr(cfg, "success_threshold", 1.0)))
    return broadcast_to_tokens(keep.to(_float(rewards).dtype), mask)


# ---- R3L (Reflect-then-Retry)


def r3l_advantages(adv: torch.Tensor, success: torch.Tensor, amplify: float = 3.0) -> torch.Tensor:
    """R3L's advantage transform, per sequence ([B], bool [B] -> [B]):

    A'_i = 1.0             if success_i
    A'_i = amplify * A_i   if not success_i and A_i >= 0
    A'_i = A_i             if A_i < 0 (and not success_i)
    Successes get a fixed, bounded push; non-negative unsuccessful samples (e.g. a retry that got
    further than its group) are amplified; negative advantages are left as they are.
    """
    if adv.dim() != 1 or success.shape != adv.shape:
        raise ValueError(f"adv and success must both be [B], got {tuple(adv.shape)} and {tuple(success.shape)}")
    if not amplify >= 0:
        raise ValueError(f"amplify must be >= 0, got {amplify!r}")
    amplified = torch.where(adv >= 0, adv * amplify, adv)
    return torch.where(success.bool(), torch.ones_like(adv), amplified)


@register_advantage_estimator("r3l")
def r3l_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> torch.Tensor:
    """R3L advantage: `r3l_advantages` on top of OPMD's group baseline.

    A_i = r_i - b_g (b_g as in "opmd": cfg.opmd_baseline / cfg.opmd_tau), success_i = r_i >=
    cfg.success_threshold (default 1.0), amplify = cfg.r3l_amplify (default 3.0). R3L trains with
    the "opmd" loss. Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    _check_shapes(rewards, groups, mask)
    r = _float(rewards)
    adv = r - opmd_baseline(rewards, groups, cfg)
    success = raft_select(r, float(getattr(cfg, "success_threshold", 1.0)))
    return broadcast_to_tokens(r3l_advantages(adv, success, float(getattr(cfg, "r3l_amplify", 3.0))), mask)
