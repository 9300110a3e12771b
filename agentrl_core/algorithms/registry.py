"""Name -> function registries of the algorithm families, one signature per family."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal, Protocol, TypeVar

import torch

from agentrl_core.errors import ConfigError

if TYPE_CHECKING:
    from agentrl_core.algorithms.loss_norm import LossNorm
    from agentrl_core.algorithms.step_batch import StepBatch


class AlgorithmParams(Protocol):
    """The settings the algorithm functions read: `agentrl_core.config.AlgorithmConfig` has them all.

    Declared here so this package never imports the config (the config's checks import the
    registries, which would close a cycle); tests/algorithms check AlgorithmConfig still fits.
    """

    epsilon: float
    norm_adv_by_std: bool
    gamma: float
    opmd_baseline: str
    opmd_tau: float
    success_threshold: float
    r3l_amplify: float
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float
    gigpo_gamma: float
    gigpo_step_weight: float


class AdvantageFn(Protocol):
    """`fn(rewards[B] float, groups[B] long, mask[B,T], cfg) -> advantages[B,T]` (0 where mask == 0)."""

    def __call__(
        self, rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmParams
    ) -> torch.Tensor: ...


class StepAdvantageFn(Protocol):
    """`fn(batch: StepBatch, cfg) -> advantages[B,T]` (0 where batch.mask == 0): an estimator that
    also reads each episode's turns (their tokens, rewards and observed states), e.g. GiGPO."""

    def __call__(self, batch: StepBatch, cfg: AlgorithmParams) -> torch.Tensor: ...


class PolicyLossFn(Protocol):
    """`fn(logp, old_logp, advantages, mask, cfg) -> (loss[B,T], stats{name: [B,T]})`, not aggregated."""

    def __call__(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        cfg: AlgorithmParams,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class KLFn(Protocol):
    """`fn(logp[B,T], ref_logp[B,T]) -> kl[B,T]`, a per-token estimate of KL(pi || pi_ref)."""

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor: ...


class AggregationFn(Protocol):
    """`fn(values[B,T], mask[B,T], norm: LossNorm) -> scalar`, normalised by the GLOBAL batch."""

    def __call__(self, values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor: ...


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}
STEP_ADVANTAGE_ESTIMATORS: dict[str, StepAdvantageFn] = {}
"""Estimators that need the turns (StepAdvantageFn); `algorithm.advantage` names one of these or of
ADVANTAGE_ESTIMATORS (a name is taken once across both), and `batch_advantage` calls either."""
Baseline = Literal["none", "group", "batch"]
ADVANTAGE_BASELINES: dict[str, Baseline] = {}
"""What each estimator compares a sample with: "group" (the other samples of its task: a group of one
gets advantage 0), "batch" (every token of the batch: a batch of one sequence gets 0), or "none"."""
POLICY_LOSSES: dict[str, PolicyLossFn] = {}
KL_ESTIMATORS: dict[str, KLFn] = {}
AGGREGATIONS: dict[str, AggregationFn] = {}

# Keys are the AlgorithmConfig field that names a member, so error messages point at the recipe key.
REGISTRIES: dict[str, dict] = {
    "advantage": ADVANTAGE_ESTIMATORS,
    "policy_loss": POLICY_LOSSES,
    "kl_estimator": KL_ESTIMATORS,
    "loss_agg_mode": AGGREGATIONS,
}

F = TypeVar("F", bound=Callable)


def _registry(kind: str) -> dict:
    if kind not in REGISTRIES:
        raise ConfigError(f"unknown algorithm registry {kind!r}; valid: {', '.join(sorted(REGISTRIES))}")
    return REGISTRIES[kind]


def register(kind: str, name: str) -> Callable[[F], F]:
    """Decorator adding a function to the `kind` registry under `name` (a name can be taken once)."""
    registry = _registry(kind)

    def add(fn: F) -> F:
        if name in registry:
            raise ValueError(f"{kind} {name!r} is already registered (by {registry[name].__module__})")
        registry[name] = fn
        return fn

    return add


def get(kind: str, name: str) -> Callable:
    """The function registered as `name` in the `kind` registry; ConfigError listing valid names if none."""
    registry = _registry(kind)
    if name not in registry:
        valid = ", ".join(sorted(registry))
        raise ConfigError(f"unknown {kind} {name!r}; valid: {valid}")
    return registry[name]


def register_advantage_estimator(name: str, *, baseline: Baseline = "none") -> Callable[[F], F]:
    """Decorator: register an AdvantageFn (selected by `algorithm.advantage`) and what its baseline
    needs (see ADVANTAGE_BASELINES), so a recipe that starves it is refused before it runs."""
    add = register("advantage", name)

    def add_with_baseline(fn: F) -> F:
        if name in STEP_ADVANTAGE_ESTIMATORS:  # one name space for algorithm.advantage
            owner = STEP_ADVANTAGE_ESTIMATORS[name].__module__
            raise ValueError(f"advantage {name!r} is already registered (by {owner})")
        registered = add(fn)
        ADVANTAGE_BASELINES[name] = baseline
        return registered

    return add_with_baseline


def register_step_advantage_estimator(name: str, *, baseline: Baseline = "none") -> Callable[[F], F]:
    """Decorator: register a StepAdvantageFn (selected by `algorithm.advantage`, like the sequence
    estimators, whose names it cannot take) and what its baseline needs (see ADVANTAGE_BASELINES)."""

    def add(fn: F) -> F:
        if name in ADVANTAGE_ESTIMATORS or name in STEP_ADVANTAGE_ESTIMATORS:
            owner = ADVANTAGE_ESTIMATORS.get(name) or STEP_ADVANTAGE_ESTIMATORS[name]
            raise ValueError(f"advantage {name!r} is already registered (by {owner.__module__})")
        STEP_ADVANTAGE_ESTIMATORS[name] = fn
        ADVANTAGE_BASELINES[name] = baseline
        return fn

    return add


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a PolicyLossFn (selected by `algorithm.policy_loss`)."""
    return register("policy_loss", name)


def register_kl_estimator(name: str) -> Callable[[F], F]:
    """Decorator: register a KLFn (selected by `algorithm.kl_estimator`)."""
    return register("kl_estimator", name)


def register_aggregation(name: str) -> Callable[[F], F]:
    """Decorator: register an AggregationFn (selected by `algorithm.loss_agg_mode`)."""
    return register("loss_agg_mode", name)


def advantage_baseline(name: str) -> Baseline:
    """The baseline kind of the estimator called `name` (ConfigError if unknown; "none" when it was
    added with the plain `register`, which declares nothing)."""
    _check_advantage_name(name)
    return ADVANTAGE_BASELINES.get(name, "none")


def advantage_names() -> list[str]:
    """Every name `algorithm.advantage` accepts: the sequence estimators and the step estimators."""
    return sorted({*ADVANTAGE_ESTIMATORS, *STEP_ADVANTAGE_ESTIMATORS})


def _check_advantage_name(name: str) -> None:
    if name not in ADVANTAGE_ESTIMATORS and name not in STEP_ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"unknown advantage {name!r}; valid: {', '.join(advantage_names())}")


def get_step_advantage_estimator(name: str) -> StepAdvantageFn:
    """The step-level advantage estimator called `name` (ConfigError listing them if unknown)."""
    if name not in STEP_ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"unknown step advantage {name!r}; valid: {', '.join(sorted(STEP_ADVANTAGE_ESTIMATORS))}")
    return STEP_ADVANTAGE_ESTIMATORS[name]


def batch_advantage(name: str) -> StepAdvantageFn:
    """Any estimator called `name` as `fn(batch: StepBatch, cfg) -> [B,T]`, so the trainer calls one
    signature: a step estimator as it is, a sequence estimator on (rewards, groups, mask) alone
    (same results as calling it directly). ConfigError listing every valid name if unknown."""
    _check_advantage_name(name)
    if name in STEP_ADVANTAGE_ESTIMATORS:
        return STEP_ADVANTAGE_ESTIMATORS[name]
    fn = ADVANTAGE_ESTIMATORS[name]

    def on_sequences(batch: StepBatch, cfg: AlgorithmParams) -> torch.Tensor:
        return fn(batch.rewards, batch.groups, batch.mask, cfg)

    return on_sequences


def get_advantage_estimator(name: str) -> AdvantageFn:
    """The sequence advantage estimator called `name` (ConfigError if unknown, or if it is a step estimator)."""
    if name in STEP_ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"advantage {name!r} is a step estimator: it needs each episode's turns, so call it "
                          "as batch_advantage(name)(StepBatch(rewards, groups, mask, turns), cfg)")
    return get("advantage", name)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss called `name` (ConfigError if unknown)."""
    return get("policy_loss", name)


def get_kl_estimator(name: str) -> KLFn:
    """The KL estimator called `name` (ConfigError if unknown)."""
    return get("kl_estimator", name)


def get_aggregation(name: str) -> AggregationFn:
    """The loss aggregation called `name` (ConfigError if unknown)."""
    return get("loss_agg_mode", name)
