"""Loss aggregation: per-token values -> one scalar, normalised by the GLOBAL batch.

Every mode is `fn(values[B,T], mask[B,T], norm: LossNorm) -> scalar`. The denominators come from
`norm`, built once for the whole optimizer batch, never from the micro-batch at hand. Each mode is
therefore a sum over sequences of a per-sequence term divided by a batch constant, so summing the
aggregate of each micro-batch (and accumulating gradients) gives exactly the full-batch loss and
gradient, whatever the micro-batch split or padding. With data parallelism build `norm` from the
counts summed over all ranks and sum (not average) the ranks' gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl_core.algorithms.registry import register_aggregation


@dataclass(frozen=True)
class LossNorm:
    """Global denominators of the aggregation modes, for one optimizer batch."""

    global_tokens: float
    """Tokens with mask != 0 in the whole batch (token-mean's denominator)."""
    global_seqs: float
    """Sequences in the whole batch (seq-mean-* denominators)."""
    scale_tokens: float
    """Constant token count of seq-mean-token-sum-norm (Dr.GRPO), e.g. the max response length."""

    def __post_init__(self) -> None:
        for name in ("global_tokens", "global_seqs", "scale_tokens"):
            if not getattr(self, name) > 0:
                raise ValueError(f"LossNorm.{name} must be > 0, got {getattr(self, name)!r}")

    @classmethod
    def for_batch(cls, mask: torch.Tensor, scale_tokens: float) -> LossNorm:
        """Denominators from the FULL batch's mask [B,T] (not a micro-batch's).

        global_seqs counts only sequences with at least one mask token: a failed rollout with no
        model tokens adds nothing to the loss and should not dilute it. Both counts are at least 1
        so an all-masked batch gives a zero loss, not NaN.
        """
        if mask.dim() != 2:
            raise ValueError(f"mask must be [B,T], got shape {tuple(mask.shape)}")
        tokens_per_seq = (mask != 0).sum(dim=-1)
        return cls(
            global_tokens=float(max(1, int(tokens_per_seq.sum()))),
            global_seqs=float(max(1, int((tokens_per_seq > 0).sum()))),
            scale_tokens=float(scale_tokens),
        )


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
