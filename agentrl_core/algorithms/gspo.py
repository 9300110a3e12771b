"""GSPO (Group Sequence Policy Optimization): a sequence-level importance ratio and its clipped loss.

The loss has policy_losses.py's contract: `fn(logp, old_logp, advantages, mask, cfg) -> (loss[B,T],
stats)`, per token, 0 where mask == 0, not aggregated.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.policy_losses import _check_shapes as check_loss_inputs
from agentrl_core.algorithms.policy_losses import _masked, _ratio_stats, token_log_ratio
from agentrl_core.algorithms.registry import AlgorithmParams, register_policy_loss

GSPO_LOG_RATIO_MAX = 10.0
"""GSPO clamps the sequence log-ratio to at most 10 (as verl) before exp: e^10 ~ 22026 is the largest s_i."""


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = mean over the response tokens of (logp - old_logp). [B,T] x3 -> [B]; 0 for an empty row.

    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|): the geometric mean of the token ratios.
    """
    lengths = (mask != 0).sum(dim=-1).clamp(min=1).to(logp.dtype)
    return token_log_ratio(logp, old_logp, mask).sum(dim=-1) / lengths


@register_policy_loss("gspo")
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Group Sequence Policy Optimization, Zheng et al. 2025), per token.

    log s_i  = mean_{t in resp_i} (logp - old_logp), then sg[.] and clamped to <= 10
    s_{i,t}  = sg[s_i] * pi_t / sg[pi_t] = exp(sg[log s_i] + logp_t - sg[logp_t])   (value s_i)
    l_{i,t}  = max(-A * s_{i,t}, -A * clip(s_{i,t}, 1 - clip_ratio_low, 1 + clip_ratio_high))
    The clip acts on the whole sequence: every token of sequence i is clipped or none is. Where not
    clipped, d l_{i,t} / d logp_t = -A * s_i; aggregated with seq-mean-token-mean (the mode GSPO
    expects, as verl) this is the paper's gradient s_i * A_i * (1/|y_i|) * sum_t grad logp_t.
    The paper's epsilons are small (clip_ratio_low 3e-4, clip_ratio_high 4e-4), not PPO's 0.2.
    With sequence-level A (broadcast) this is GSPO; with per-token A it is the paper's GSPO-token.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0). Stats: "ratio"/"ppo_kl" per token
    as every loss, "seq_ratio" s_i on every token of row i, "clipfrac" 1.0 on rows whose clip is active.
    """
    check_loss_inputs(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    seq_log_ratio = sequence_log_ratio(logp, old_logp, mask).detach().clamp(max=GSPO_LOG_RATIO_MAX)
    log_s = seq_log_ratio[:, None] + logp - logp.detach()
    s = torch.exp(_masked(log_s, mask))  # padding may hold -inf; exp(0) there is masked again below
    l1 = -advantages * s
    l2 = -advantages * torch.clamp(s, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    stats = _ratio_stats(token_log_ratio(logp, old_logp, mask), mask)
    stats["seq_ratio"] = _masked(s.detach(), mask)
    stats["clipfrac"] = _masked((l2 > l1).to(logp.dtype), mask)
    return _masked(torch.maximum(l1, l2), mask), stats
