"""The global denominators of loss aggregation (`LossNorm`), built once per optimizer batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
