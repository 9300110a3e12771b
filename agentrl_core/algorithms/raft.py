"""RAFT (reward-ranked fine-tuning): keep the successful samples, weigh them 1, train them with the SFT loss.

`cfg.success_threshold` (default 1.0) is read with getattr, so any object with the field works.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.advantages import _check_shapes as check_advantage_inputs
from agentrl_core.algorithms.advantages import broadcast_to_tokens, float_rewards
from agentrl_core.algorithms.policy_losses import _check_shapes as check_loss_inputs
from agentrl_core.algorithms.policy_losses import _masked, _ratio_stats, token_log_ratio
from agentrl_core.algorithms.registry import AlgorithmParams, register_advantage_estimator, register_policy_loss


def raft_select(rewards: torch.Tensor, threshold: float) -> torch.Tensor:
    """RAFT's filter: keep[i] = rewards[i] >= threshold (the successful samples). [B] -> bool [B]."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    return rewards >= threshold


@register_advantage_estimator("raft")
def raft_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """RAFT (reward-ranked fine-tuning) weight: A_i = 1 if r_i >= cfg.success_threshold (default 1) else 0.

    With the "raft" policy loss (-A * logp) this is SFT on the successful samples only. Groups are
    ignored. Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    check_advantage_inputs(rewards, groups, mask)
    keep = raft_select(rewards, float(getattr(cfg, "success_threshold", 1.0)))
    return broadcast_to_tokens(keep.to(float_rewards(rewards).dtype), mask)


@register_policy_loss("raft")
def raft_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """RAFT: the SFT negative log-likelihood on the kept samples, l = -A * logp per token.

    A is a weight, 1 for kept (successful) samples and 0 for the others, as the "raft" advantage
    estimator gives; no ratio, no clipping. Note the aggregation's denominators count every sample
    in the batch: to get the plain SFT mean over kept tokens, drop the unkept trajectories with
    `raft_select` before the update (then A = 1 everywhere) instead of weighting them by 0.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats "ratio", "ppo_kl".
    """
    check_loss_inputs(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    return _masked(-advantages * logp, mask), _ratio_stats(token_log_ratio(logp, old_logp, mask), mask)
