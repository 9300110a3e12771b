"""More policy losses: OPMD, GSPO (sequence-level ratio) and RAFT, with policy_losses.py's contract.

Every loss is `fn(logp, old_logp, advantages, mask, cfg) -> (loss[B,T], stats)`, per token, 0 where
mask == 0, not aggregated; stats are detached [B,T], 0 off-mask, and always hold "ratio" and
"ppo_kl" (see policy_losses.py). Options not yet in AlgorithmConfig are read with getattr:
`opmd_tau` (default 1.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from agentrl_core.algorithms.policy_losses import LOG_RATIO_LIMIT, _check_shapes, _masked, _ratio_stats
from agentrl_core.algorithms.registry import register_policy_loss
from agentrl_core.errors import ConfigError

if TYPE_CHECKING:
    from agentrl_core.config import AlgorithmConfig

GSPO_LOG_RATIO_MAX = 10.0
"""GSPO clamps the sequence log-ratio to at most 10 (as verl) before exp: e^10 ~ 22026 is the largest s_i."""


def _token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """clamp(logp - old_logp, -20, 20), 0 off-mask (padding may hold -inf)."""
    return _masked(torch.clamp(logp - old_logp, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT), mask)


@register_policy_loss("opmd")
def opmd_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OPMD (Trinity-RFT) loss per token: l = -A * logp / (1 + tau), tau = cfg.opmd_tau (default 1.0).

    No ratio and no clipping: the gradient is -A / (1 + tau) on every response token, whatever
    old_logp is (OPMD is built for off-policy data). Trinity-RFT applies the 1/(1 + tau) to the
    token-mean of -A*logp; per token it is the same under any aggregation. The reference
    regulariser is usually a k2 KL in the loss (kl_estimator: k2). old_logp only feeds the stats.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats "ratio" and "ppo_kl".
    """
    _check_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    tau = float(getattr(cfg, "opmd_tau", 1.0))
    if not tau > 0:
        raise ConfigError(f"algorithm.opmd_tau must be > 0, got {tau!r}")
    loss = -advantages * logp / (1.0 + tau)
    return _masked(loss, mask), _ratio_stats(_token_log_ratio(logp, old_logp, mask), mask)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = mean over the response tokens of (logp - old_logp). [B,T] x3 -> [B]; 0 for an empty row.

    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|): the geometric mean of the token ratios.
    """
    lengths = (mask != 0).sum(dim=-1).clamp(min=1).to(logp.dtype)
    return _token_log_ratio(logp, old_logp, mask).sum(dim=-1) / lengths


@register_policy_loss("gspo")
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmConfig,
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
    _check_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    seq_log_ratio = sequence_log_ratio(logp, old_logp, mask).detach().clamp(max=GSPO_LOG_RATIO_MAX)
    log_s = seq_log_ratio[:, None] + logp - logp.detach()
    s = torch.exp(_masked(log_s, mask))  # padding may hold -inf; exp(0) there is masked again below
    l1 = -advantages * s
    l2 = -advantages * torch.clamp(s, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    stats = _ratio_stats(_token_log_ratio(logp, old_logp, mask), mask)
    stats["seq_ratio"] = _masked(s.detach(), mask)
    stats["clipfrac"] = _masked((l2 > l1).to(logp.dtype), mask)
    return _masked(torch.maximum(l1, l2), mask), stats


@register_policy_loss("raft")
def raft_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """RAFT: the SFT negative log-likelihood on the kept samples, l = -A * logp per token.

    A is a weight, 1 for kept (successful) samples and 0 for the others, as the "raft" advantage
    estimator gives; no ratio, no clipping. Note the aggregation's denominators count every sample
    in the batch: to get the plain SFT mean over kept tokens, drop the unkept trajectories with
    `raft_select` before the update (then A = 1 everywhere) instead of weighting them by 0.
    Shapes: all inputs [B,T] -> loss [B,T] (0 where mask == 0), stats "ratio", "ppo_kl".
    """
    _check_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    return _masked(-advantages * logp, mask), _ratio_stats(_token_log_ratio(logp, old_logp, mask), mask)
