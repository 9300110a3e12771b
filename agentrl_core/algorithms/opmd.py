"""OPMD (Trinity-RFT's online policy mirror descent): its group baseline, its advantage and its loss.

The advantage has the estimators' signature (advantages.py), the loss the policy losses' one
(policy_losses.py). `cfg.opmd_baseline` ("mean") and `cfg.opmd_tau` (1.0) are read with getattr, so
any object with the fields works (the defaults are the documented ones).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from agentrl_core.algorithms.advantages import _check_shapes as check_advantage_inputs
from agentrl_core.algorithms.advantages import broadcast_to_tokens, float_rewards, group_stats, zero_without_spread
from agentrl_core.algorithms.policy_losses import _check_shapes as check_loss_inputs
from agentrl_core.algorithms.policy_losses import _masked, _ratio_stats, token_log_ratio
from agentrl_core.algorithms.registry import AlgorithmParams, register_advantage_estimator, register_policy_loss
from agentrl_core.errors import ConfigError

OPMD_BASELINES = ("logavgexp", "mean")
"""Valid values of `cfg.opmd_baseline`."""


def _positive(cfg: Any, name: str, default: float) -> float:
    value = float(getattr(cfg, name, default))
    if not value > 0:
        raise ConfigError(f"algorithm.{name} must be > 0, got {value!r}")
    return value


def group_logavgexp(values: torch.Tensor, groups: torch.Tensor, tau: float) -> torch.Tensor:
    """Per sample: tau * log(mean_{j in g} exp(v_j / tau)) of its group g. Shapes: [B], [B] -> [B].

    Computed stably around the group max: tau * (max_g + log(sum_j exp(v_j/tau - max_g) / n_g)), with
    max_g = max_j v_j / tau. It lies between mean_g (tau -> inf) and max_g (tau -> 0).
    """
    x = float_rewards(values) / tau
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


@register_advantage_estimator("opmd", baseline="group")
def opmd_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """OPMD (Trinity-RFT, online policy mirror descent) advantage: A_i = r_i - b_g.

    b_g = mean_g r                              (cfg.opmd_baseline = "mean", default)
    b_g = tau * log(mean_{j in g} exp(r_j/tau))  ("logavgexp", tau = cfg.opmd_tau, default 1.0)
    A group without spread (one sample, or all rewards equal) gets A = 0 exactly (both baselines equal
    r_i up to rounding). Trinity-RFT uses baseline 0 for a lone sample (A = r_i); like our GRPO, a group
    without spread carries no relative signal here. Pair with the "opmd" loss.
    Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    check_advantage_inputs(rewards, groups, mask)
    adv = float_rewards(rewards) - opmd_baseline(rewards, groups, cfg)
    return broadcast_to_tokens(zero_without_spread(adv, rewards, groups), mask)


@register_policy_loss("opmd")
def opmd_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OPMD (Trinity-RFT) loss per token: l = -A * logp / (1 + tau), tau = cfg.opmd_tau (default 1.0).

    No ratio and no clipping: the gradient is -A / (1 + tau) on every response token, whatever
    old_logp is (OPMD is built for off-policy data). Trinity-RFT applies the 1/(1 + tau) to the
    token-mean of -A*logp; per token it is the same under any aggregation. The reference
    regulariser is usually a k2 KL in the loss (kl_estimator: k2). old_logp only feeds the stats.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats "ratio" and "ppo_kl".
    """
    check_loss_inputs(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    tau = float(getattr(cfg, "opmd_tau", 1.0))
    if not tau > 0:
        raise ConfigError(f"algorithm.opmd_tau must be > 0, got {tau!r}")
    loss = -advantages * logp / (1.0 + tau)
    return _masked(loss, mask), _ratio_stats(token_log_ratio(logp, old_logp, mask), mask)
