"""The loss's regularisers: per-token KL(pi || pi_ref) estimators (k1/k2/k3) and policy entropy.

Every KL estimator is `fn(logp[B,T], ref_logp[B,T]) -> kl[B,T]` on the log-probs of the sampled
tokens; tokens come from pi, so the mean over tokens estimates KL(pi || pi_ref). Masking is the
aggregation's job. `entropy_from_logits` is a plain helper, not a registry member.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.registry import register_kl_estimator

K3_LOG_RATIO_LIMIT = 20.0
"""k3 clamps d = ref_logp - logp to [-20, 20] before exp (as verl's low_var_kl)."""
K3_VALUE_LIMIT = 10.0
"""k3 clamps the per-token estimate to [-10, 10] (as verl), bounding one outlier token's pull."""


def _check_shapes(logp: torch.Tensor, ref_logp: torch.Tensor) -> None:
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have one shape, got {tuple(logp.shape)} and {tuple(ref_logp.shape)}")


@register_kl_estimator("k1")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp (unbiased, high variance, can be negative per token)."""
    _check_shapes(logp, ref_logp)
    return logp - ref_logp


@register_kl_estimator("k2")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (logp - ref_logp)^2 (biased, low variance, >= 0; its gradient is that of KL)."""
    _check_shapes(logp, ref_logp)
    return 0.5 * (logp - ref_logp) ** 2


@register_kl_estimator("k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 (verl's low_var_kl) = clamp(exp(d) - d - 1, -10, 10), d = clamp(ref_logp - logp, -20, 20).

    Unbiased and >= 0 (e^d >= 1 + d) before the clamps, with lower variance than k1.
    """
    _check_shapes(logp, ref_logp)
    d = torch.clamp(ref_logp - logp, -K3_LOG_RATIO_LIMIT, K3_LOG_RATIO_LIMIT)
    return torch.clamp(torch.exp(d) - d - 1.0, -K3_VALUE_LIMIT, K3_VALUE_LIMIT)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: H = logsumexp(z) - sum_v softmax(z)_v * z_v.

    Shapes: [..., V] -> [...]. Stable for large logits (computed on z - max z). Logits of -inf (tokens
    removed by top-k/top-p) have probability 0 and add nothing, without NaN in value or gradient.
    """
    # H is shift-invariant; centring on the max avoids cancelling two large numbers (1000.69 - 1000).
    z = logits - logits.amax(dim=-1, keepdim=True).detach()
    probs = torch.softmax(z, dim=-1)
    # 0 * -inf is NaN: replace non-finite logits by 0 where their probability is 0 anyway.
    finite = torch.where(torch.isfinite(z), z, z.new_zeros(()))
    return torch.logsumexp(z, dim=-1) - (probs * finite).sum(dim=-1)
