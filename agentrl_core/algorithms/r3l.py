"""R3L's advantages (reflect-then-retry): OPMD's group baseline, successes fixed at 1, other non-negative ones amplified.

The rollout half of R3L (reflect, then retry from a named step) is agentrl_core/rollout/r3l.py.
`cfg.success_threshold` (1.0) and `cfg.r3l_amplify` (3.0) are read with getattr.
"""

from __future__ import annotations

import torch

from agentrl_core.algorithms.advantages import _check_shapes as check_advantage_inputs
from agentrl_core.algorithms.advantages import broadcast_to_tokens, float_rewards, zero_without_spread
from agentrl_core.algorithms.opmd import opmd_baseline
from agentrl_core.algorithms.raft import raft_select
from agentrl_core.algorithms.registry import AlgorithmParams, register_advantage_estimator


def r3l_advantages(adv: torch.Tensor, success: torch.Tensor, amplify: float = 3.0) -> torch.Tensor:
    """R3L's advantage transform, per sequence ([B], bool [B] -> [B]):

    A'_i = 1.0             if success_i
    A'_i = amplify * A_i   if not success_i and A_i >= 0
    A'_i = A_i             if A_i < 0 (and not success_i)
    Successes get a fixed, bounded push; non-negative unsuccessful samples (e.g. a retry that got
    further than its group) are amplified; negative advantages are left as they are.
    """
    if adv.dim() != 1 or success.shape != adv.shape:
        raise ValueError(f"adv and success must both be [B], got {tuple(adv.shape)} and {tuple(success.shape)}")
    if not amplify >= 0:
        raise ValueError(f"amplify must be >= 0, got {amplify!r}")
    amplified = torch.where(adv >= 0, adv * amplify, adv)
    return torch.where(success.bool(), torch.ones_like(adv), amplified)


@register_advantage_estimator("r3l")
def r3l_advantage(
    rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
) -> torch.Tensor:
    """R3L advantage: `r3l_advantages` on top of OPMD's group baseline.

    A_i = r_i - b_g (b_g as in "opmd": cfg.opmd_baseline / cfg.opmd_tau; 0 exactly in a group without
    spread, so rounding noise is never amplified), success_i = r_i >=
    cfg.success_threshold (default 1.0), amplify = cfg.r3l_amplify (default 3.0). R3L trains with
    the "opmd" loss. Shapes: rewards [B], groups [B], mask [B,T] -> [B,T] (0 where mask == 0).
    """
    check_advantage_inputs(rewards, groups, mask)
    r = float_rewards(rewards)
    adv = zero_without_spread(r - opmd_baseline(rewards, groups, cfg), rewards, groups)
    success = raft_select(r, float(getattr(cfg, "success_threshold", 1.0)))
    return broadcast_to_tokens(r3l_advantages(adv, success, float(getattr(cfg, "r3l_amplify", 3.0))), mask)
