"""Truncated importance sampling (TIS): correct the rollout engine / trainer log-prob mismatch.

The engine (vLLM, HF generate) samples from pi_engine, whose log-probs differ slightly from the
trainer's pi_old on the same weights (kernels, precision). The policy gradient assumes samples
from pi_old, so each token's loss is reweighted by the capped ratio, as verl (tis_imp_ratio_cap)
and OpenRLHF (vLLM importance sampling) do:
    w_t = min(pi_old(y_t) / pi_engine(y_t), C) = min(exp(old_logp_t - engine_logp_t), C)
    pg_loss_t <- w_t * pg_loss_t         (w detached: a constant weight, not a gradient path)
Trainer use, after the policy loss and before the aggregation:
    pg = apply_tis(pg, tis_weights(old_logp, engine_logp, mask, cfg.tis_cap))
"""

from __future__ import annotations

import torch

TIS_LOG_RATIO_LIMIT = 20.0
"""|old_logp - engine_logp| is clamped to this before exp (the cap bounds it from above anyway)."""


def tis_weights(old_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """w[i,t] = min(exp(old_logp - engine_logp), cap), detached, exactly 0 where mask == 0.

    Shapes: [B,T] x3 -> [B,T]. cap > 0 (2 to 3 is usual; large caps keep more variance). Only
    the top is truncated: tokens the engine over-sampled get w < 1.
    """
    if not (old_logp.shape == engine_logp.shape == mask.shape) or mask.dim() != 2:
        raise ValueError(
            f"old_logp, engine_logp and mask must all be [B,T] of one shape, got "
            f"{tuple(old_logp.shape)}, {tuple(engine_logp.shape)}, {tuple(mask.shape)}"
        )
    if not cap > 0:
        raise ValueError(f"TIS cap must be > 0, got {cap!r}")
    on = mask != 0
    diff = torch.where(on, old_logp.detach() - engine_logp.detach(), old_logp.new_zeros(()))
    w = torch.clamp(torch.exp(diff.clamp(-TIS_LOG_RATIO_LIMIT, TIS_LOG_RATIO_LIMIT)), max=cap)
    return torch.where(on, w, w.new_zeros(()))


def apply_tis(pg_loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """pg_loss[i,t] * weights[i,t] (weights detached). [B,T], [B,T] -> [B,T]; 0 stays 0 off-mask."""
    if pg_loss.shape != weights.shape:
        raise ValueError(
            f"pg_loss and weights must have one shape, got {tuple(pg_loss.shape)} and {tuple(weights.shape)}"
        )
    return pg_loss * weights.detach()
