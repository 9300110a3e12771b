"""Reward shaping before the advantage: DAPO's overlong penalty and a KL penalty in the reward.

Both return new sequence rewards [B]; the caller adds/replaces them before calling the advantage
estimator. They are plain functions, not registry members: they change the data, not the loss.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.registry import get_kl_estimator


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward: [B] -> [B] float, <= 0.

    p_i = min(-(len_i - (L_max - L_buf)) / L_buf * factor, 0)
    0 up to L_max - L_buf tokens, then falling linearly to -factor at len = L_max (and below it
    beyond, as the formula says; a response cut at L_max gets exactly -factor).
    `lengths` counts the response (model) tokens of each sample.
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D [B], got shape {tuple(lengths.shape)}")
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"need 0 < buffer_len <= max_len, got buffer_len={buffer_len}, max_len={max_len}")
    if not factor >= 0:
        raise ValueError(f"factor must be >= 0, got {factor!r}")
    exceed = lengths.to(torch.float32) - (max_len - buffer_len)
    return torch.clamp(-exceed / buffer_len * factor, max=0.0)


def kl_penalized_rewards(
    rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    estimator: str = "k1",
) -> torch.Tensor:
    """KL in the reward: r'_i = r_i - beta * sum_{t: mask != 0} kl_t, detached. [B], [B,T] x3 -> [B].

    kl_t is the named KL estimator ("k1" logp - ref_logp by default, as verl's use_kl_in_reward;
    "k2", "k3" too) on the log-probs of the sampled tokens under the policy that generated them and
    the reference. It is summed over the response tokens (a sequence-level cost). Rewards are
    data, not a differentiable loss, so the result carries no gradient. The other path, the KL
    term in the loss (algorithm.kl_coef), is separate; use one or the other.
    """
    if rewards.dim() != 1 or mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(f"need rewards [B] and mask [B,T], got {tuple(rewards.shape)} and {tuple(mask.shape)}")
    if logp.shape != mask.shape or ref_logp.shape != mask.shape:
        raise ValueError(
            f"logp and ref_logp must be [B,T] = {tuple(mask.shape)}, got {tuple(logp.shape)}, {tuple(ref_logp.shape)}"
        )
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    kl = get_kl_estimator(estimator)(logp.detach(), ref_logp.detach())
    per_seq = torch.where(mask != 0, kl, kl.new_zeros(())).sum(dim=-1)
    return rewards.to(per_seq.dtype) - beta * per_seq
