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
"""The overflow guard: log s_{i,t} is clamped to at most 10 before exp (as verl), with its gradient, so
a sequence whose ratio exceeds e^10 ~ 22026 gets no gradient (see `gspo_loss`)."""


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = mean over the response tokens of the RAW (logp - old_logp). [B,T] x3 -> [B]; 0 for an empty row.

    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|): the geometric mean of the token ratios (Zheng et al.
    2025, as verl). The token log-ratios are not clamped one by one: a clamp there would change the mean
    itself (log-ratios [-25, 0, 0, 0, 0] give s = e^-5, not e^-4); the only guard acts on the sequence.
    """
    lengths = (mask != 0).sum(dim=-1).clamp(min=1).to(logp.dtype)
    return _masked(logp - old_logp, mask).sum(dim=-1) / lengths


@register_policy_loss("gspo")
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmParams,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Group Sequence Policy Optimization, Zheng et al. 2025), per token.

    log s_i  = mean_{t in resp_i} (logp - old_logp)                     (raw token log-ratios)
    s_{i,t}  = exp(min(sg[log s_i] + logp_t - sg[logp_t], 10))          (value s_i, or e^10 if larger)
    l_{i,t}  = max(-A * s_{i,t}, -A * clip(s_{i,t}, 1 - clip_ratio_low, 1 + clip_ratio_high))
    The clip acts on the whole sequence: every token of sequence i is clipped or none is. Where not
    clipped, d l_{i,t} / d logp_t = -A * s_i; aggregated with seq-mean-token-mean (the mode GSPO
    expects, as verl) this is the paper's gradient s_i * A_i * (1/|y_i|) * sum_t grad logp_t.
    The paper's epsilons are small (clip_ratio_low 3e-4, clip_ratio_high 4e-4), not PPO's 0.2.
    With sequence-level A (broadcast) this is GSPO; with per-token A it is the paper's GSPO-token.
    The cap at 10 (the paper has none) is verl's, gradient included: where log s_i > 10 the min binds
    and the sequence gets NO gradient. Chosen on purpose over keeping -A * e^10 per token: a sequence
    whose geometric-mean ratio passed e^10 is a sample the trainer and the sampler disagree on
    completely (stale, or an engine/trainer mismatch), A > 0 is clipped there anyway, and for A < 0 a
    gradient of 22026 * |A| per token would dominate the batch's gradient and, after grad clipping,
    erase every other sample's.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0). Stats: "ratio"/"ppo_kl" per token
    as every loss, "seq_ratio" s_i on every token of row i, "clipfrac" 1.0 on rows whose clip is active.
    """
    check_loss_inputs(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    seq_log_ratio = sequence_log_ratio(logp, old_logp, mask).detach()
    log_s = torch.clamp(seq_log_ratio[:, None] + logp - logp.detach(), max=GSPO_LOG_RATIO_MAX)
    s = torch.exp(_masked(log_s, mask))  # padding may hold -inf; exp(0) there is masked again below
    l1 = -advantages * s
    l2 = -advantages * torch.clamp(s, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    stats = _ratio_stats(token_log_ratio(logp, old_logp, mask), mask)
    stats["seq_ratio"] = _masked(s.detach(), mask)
    stats["clipfrac"] = _masked((l2 > l1).to(logp.dtype), mask)
    return _masked(torch.maximum(l1, l2), mask), stats
