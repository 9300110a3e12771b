"""RL algorithm pieces as pure torch functions, one signature per family, looked up by name.

The trainer composes them and never branches on a name:
    adv = batch_advantage(cfg.advantage)(StepBatch(rewards, groups, mask, turns), cfg)
          (a sequence estimator reads rewards, groups, mask; a step estimator, e.g. GiGPO, the turns too)
    pg, stats = get_policy_loss(cfg.policy_loss)(logp, old_logp, adv, mask, cfg)
    agg = get_aggregation(cfg.loss_agg_mode);  norm = LossNorm.for_batch(full_mask, cfg.loss_scale_tokens)
    loss = agg(pg, mask, norm) + cfg.kl_coef * agg(get_kl_estimator(cfg.kl_estimator)(logp, ref_logp), mask, norm)
           - cfg.entropy_coef * agg(entropy_from_logits(logits), mask, norm)
New members are added with the `register_*` decorators; importing this package fills the registries.
Outside the registries (they change the data, not the loss): reward shaping (`overlong_penalty`,
`kl_penalized_rewards`), DAPO's `dynamic_sampling_keep`, RAGEN's `top_variance_keep`, RAFT's `raft_select`, R3L's
`r3l_advantages`, and truncated importance sampling (`tis_weights`, `apply_tis`).
"""

# Imported for their side effect of registering the built-in members. One module per algorithm
# family beyond the shared contracts (advantages.py: group-relative estimators; policy_losses.py).
from agentrl_core.algorithms.advantages import (
    GroupStats,
    drgrpo_advantage,
    group_has_spread,
    group_stats,
    grpo_advantage,
    rloo_advantage,
)
from agentrl_core.algorithms.aggregation import LossNorm
from agentrl_core.algorithms.dynamic_sampling import dynamic_sampling_keep, groups_still_needed
from agentrl_core.algorithms.gigpo import discounted_returns, gigpo_advantage, normalise_within, step_advantages
from agentrl_core.algorithms.gspo import gspo_loss, sequence_log_ratio
from agentrl_core.algorithms.kl import entropy_from_logits, kl_k1, kl_k2, kl_k3
from agentrl_core.algorithms.opmd import group_logavgexp, opmd_advantage, opmd_baseline, opmd_loss
from agentrl_core.algorithms.policy_losses import ppo_clip_loss, vanilla_pg_loss
from agentrl_core.algorithms.r3l import r3l_advantage, r3l_advantages
from agentrl_core.algorithms.raft import raft_advantage, raft_loss, raft_select
from agentrl_core.algorithms.registry import (
    ADVANTAGE_BASELINES,
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    REGISTRIES,
    STEP_ADVANTAGE_ESTIMATORS,
    AdvantageFn,
    AggregationFn,
    AlgorithmParams,
    KLFn,
    PolicyLossFn,
    StepAdvantageFn,
    advantage_baseline,
    advantage_names,
    batch_advantage,
    get,
    get_advantage_estimator,
    get_aggregation,
    get_kl_estimator,
    get_policy_loss,
    get_step_advantage_estimator,
    register,
    register_advantage_estimator,
    register_aggregation,
    register_kl_estimator,
    register_policy_loss,
    register_step_advantage_estimator,
)
from agentrl_core.algorithms.reinforce_pp import (
    discounted_outcome_returns,
    masked_whiten,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
)
from agentrl_core.algorithms.shaping import kl_penalized_rewards, overlong_penalty
from agentrl_core.algorithms.step_batch import StepBatch, StepTurn
from agentrl_core.algorithms.tis import apply_tis, tis_weights
from agentrl_core.algorithms.variance_filter import groups_to_keep, top_variance_keep

__all__ = [
    "ADVANTAGE_BASELINES",
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "REGISTRIES",
    "STEP_ADVANTAGE_ESTIMATORS",
    "AdvantageFn",
    "AggregationFn",
    "AlgorithmParams",
    "GroupStats",
    "KLFn",
    "LossNorm",
    "PolicyLossFn",
    "StepAdvantageFn",
    "StepBatch",
    "StepTurn",
    "advantage_baseline",
    "advantage_names",
    "apply_tis",
    "batch_advantage",
    "discounted_outcome_returns",
    "discounted_returns",
    "drgrpo_advantage",
    "dynamic_sampling_keep",
    "entropy_from_logits",
    "get",
    "get_advantage_estimator",
    "get_aggregation",
    "get_kl_estimator",
    "get_policy_loss",
    "get_step_advantage_estimator",
    "gigpo_advantage",
    "group_has_spread",
    "groups_to_keep",
    "group_logavgexp",
    "group_stats",
    "groups_still_needed",
    "grpo_advantage",
    "gspo_loss",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalized_rewards",
    "masked_whiten",
    "normalise_within",
    "opmd_advantage",
    "opmd_baseline",
    "opmd_loss",
    "overlong_penalty",
    "ppo_clip_loss",
    "r3l_advantage",
    "r3l_advantages",
    "raft_advantage",
    "raft_loss",
    "raft_select",
    "register",
    "register_advantage_estimator",
    "register_aggregation",
    "register_kl_estimator",
    "register_policy_loss",
    "register_step_advantage_estimator",
    "reinforce_pp_advantage",
    "reinforce_pp_baseline_advantage",
    "rloo_advantage",
    "sequence_log_ratio",
    "step_advantages",
    "tis_weights",
    "top_variance_keep",
    "vanilla_pg_loss",
]

from agentrl_core.plugins import load_plugins  # noqa: E402

load_plugins()  # users' own envs, estimators, losses and engines (agentrl_core/plugins.py), once per process
