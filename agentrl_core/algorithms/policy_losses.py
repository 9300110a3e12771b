"""Policy-gradient losses: per-token loss and per-token stats, aggregation left to the caller.

Every loss is `fn(logp, old_logp, advantages, mask, cfg) -> (loss, stats)`, all tensors [B,T]:
`logp` are the trainer's log-probs of the sampled tokens (with grad), `old_logp` those of the
policy that sampled them (no grad), `mask` 1 for model tokens. `loss` is 0 where mask == 0 and
is NOT reduced: the trainer applies the configured aggregation. Every stats tensor is [B,T]
float, detached, 0 where mask == 0, so `AGGREGATIONS["token-mean"](stat, mask, norm)` is its mean:
  "ratio"   rho = exp(logp - old_logp)
  "ppo_kl"  old_logp - logp (k1 estimate of KL(pi_old || pi); its mean is verl's ppo_kl)
and, for ppo_clip only:
  "clipfrac"       1.0 where the clipped term was the larger one (the clip was active)
  "dual_clipfrac"  1.0 where A < 0 and the dual-clip cap -A*c was the binding term
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.registry import AlgorithmParams, register_policy_loss

LOG_RATIO_LIMIT = 20.0
"""|logp - old_logp| is clamped to this before exp, so one stale token cannot overflow the ratio."""


def _check_shapes(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or len(next(iter(shapes.values()))) != 2:
        raise ValueError(f"policy loss inputs must all be [B,T] of one shape, got {shapes}")


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values where mask != 0, exactly 0 elsewhere (where, not multiply: padding may hold inf)."""
    return torch.where(mask != 0, values, values.new_zeros(()))


def token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """clamp(logp - old_logp, -20, 20), 0 off-mask (padding may hold -inf)."""
    return _masked(torch.clamp(logp - old_logp, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT), mask)


def _ratio_stats(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    log_ratio = log_ratio.detach()
    return {"ratio": _masked(torch.exp(log_ratio), mask), "ppo_kl": _masked(-log_ratio, mask)}


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dual-clip PPO surrogate, per token.

    rho = exp(clamp(logp - old_logp, -20, 20))
    l1 = -A*rho;  l2 = -A*clip(rho, 1 - clip_ratio_low, 1 + clip_ratio_high);  l = max(l1, l2)
    for A < 0 additionally l = min(l, -A*c) with c = clip_ratio_c (> 1): a huge ratio on a bad
    token cannot produce an unbounded loss (Ye et al. 2020, "dual-clip").
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats as in the module docstring.
    """
    _check_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    log_ratio = torch.clamp(logp - old_logp, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    clipped = torch.maximum(l1, l2)
    l3 = -advantages * cfg.clip_ratio_c
    negative = advantages < 0
    loss = torch.where(negative, torch.minimum(clipped, l3), clipped)
    stats = _ratio_stats(log_ratio, mask)
    stats["clipfrac"] = _masked((l2 > l1).to(logp.dtype), mask)
    stats["dual_clipfrac"] = _masked((negative & (clipped > l3)).to(logp.dtype), mask)
    return _masked(loss, mask), stats


@register_policy_loss("vanilla_pg")
def vanilla_pg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE: loss = -A * logp per token (no ratio, no clipping; old_logp only feeds the stats).

    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats "ratio" and "ppo_kl".
    """
    _check_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    log_ratio = torch.clamp(logp - old_logp, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return _masked(-advantages * logp, mask), _ratio_stats(log_ratio, mask)
