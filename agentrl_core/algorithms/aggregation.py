"""Loss aggregation: per-token values -> one scalar, normalised by the GLOBAL batch.

Every mode is `fn(values[B,T], mask[B,T], norm: LossNorm) -> scalar`. The denominators come from
`norm`, built once for the whole optimizer batch, never from the micro-batch at hand. Each mode is
therefore a sum over sequences of a per-sequence term divided by a batch constant, so summing the
aggregate of each micro-batch (and accumulating gradients) gives exactly the full-batch loss and
gradient, whatever the micro-batch split or padding. With data parallelism build `norm` from the
counts summed over all ranks and sum (not average) the ranks' gradients.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.loss_norm import LossNorm
from agentrl_core.algorithms.registry import register_aggregation

__all__ = ["LossNorm", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_mean"]


def _masked_seq_sums(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B]: sum_t values[i,t] over mask != 0 (where, not multiply: padding may hold inf/NaN)."""
    if values.shape != mask.shape or values.dim() != 2:
        raise ValueError(f"values and mask must both be [B,T], got {tuple(values.shape)} and {tuple(mask.shape)}")
    return torch.where(mask != 0, values, values.new_zeros(())).sum(dim=-1)


@register_aggregation("token-mean")
def token_mean(values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """sum_{i,t} v[i,t]*m[i,t] / global_tokens: every token weighs the same (DAPO)."""
    return _masked_seq_sums(values, mask).sum() / norm.global_tokens


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """sum_i (sum_t v[i,t]*m[i,t]) / global_seqs: longer sequences weigh more."""
    return _masked_seq_sums(values, mask).sum() / norm.global_seqs


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """sum_i (sum_t v[i,t]*m[i,t] / max(1, sum_t m[i,t])) / global_seqs: every sequence weighs the same (GRPO)."""
    lengths = (mask != 0).sum(dim=-1).clamp(min=1).to(values.dtype)
    return (_masked_seq_sums(values, mask) / lengths).sum() / norm.global_seqs


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """sum_{i,t} v[i,t]*m[i,t] / (global_seqs * scale_tokens): Dr.GRPO's length-unbiased constant."""
    return _masked_seq_sums(values, mask).sum() / (norm.global_seqs * norm.scale_tokens)
