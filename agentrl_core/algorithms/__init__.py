"""RL algorithm pieces as pure torch functions, one signature per family, looked up by name.

The trainer composes them and never branches on a name:
    adv = get_advantage_estimator(cfg.advantage)(rewards, groups, mask, cfg)
    pg, stats = get_policy_loss(cfg.policy_loss)(logp, old_logp, adv, mask, cfg)
    agg = get_aggregation(cfg.loss_agg_mode);  norm = LossNorm.for_batch(full_mask, cfg.loss_scale_tokens)
    loss = agg(pg, mask, norm) + cfg.kl_coef * agg(get_kl_estimator(cfg.kl_estimator)(logp, ref_logp), mask, norm)
           - cfg.entropy_coef * agg(entropy_from_logits(logits), mask, norm)
New members are added with the `register_*` decorators; importing this package fills the registries.
"""

from agentrl_core.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    REGISTRIES,
    AdvantageFn,
    AggregationFn,
    KLFn,
    PolicyLossFn,
    get,
    get_advantage_estimator,
    get_aggregation,
    get_kl_estimator,
    get_policy_loss,
    register,
    register_advantage_estimator,
    register_aggregation,
    register_kl_estimator,
    register_policy_loss,
)

# Imported for their side effect of registering the built-in members.
from agentrl_core.algorithms.advantages import GroupStats, group_stats, grpo_advantage, rloo_advantage
from agentrl_core.algorithms.aggregation import LossNorm
from agentrl_core.algorithms.kl import entropy_from_logits, kl_k1, kl_k2, kl_k3
from agentrl_core.algorithms.policy_losses import ppo_clip_loss, vanilla_pg_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "REGISTRIES",
    "AdvantageFn",
    "AggregationFn",
    "GroupStats",
    "KLFn",
    "LossNorm",
    "PolicyLossFn",
    "entropy_from_logits",
    "get",
    "get_advantage_estimator",
    "get_aggregation",
    "get_kl_estimator",
    "get_policy_loss",
    "group_stats",
    "grpo_advantage",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "ppo_clip_loss",
    "register",
    "register_advantage_estimator",
    "register_aggregation",
    "register_kl_estimator",
    "register_policy_loss",
    "rloo_advantage",
    "vanilla_pg_loss",
]
