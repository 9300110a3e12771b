"""Name -> function registries of the algorithm families, one signature per family."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

import torch

from agentrl_core.errors import ConfigError

if TYPE_CHECKING:
    from agentrl_core.algorithms.aggregation import LossNorm
    from agentrl_core.config import AlgorithmConfig


class AdvantageFn(Protocol):
    """`fn(rewards[B] float, groups[B] long, mask[B,T], cfg) -> advantages[B,T]` (0 where mask == 0)."""

    def __call__(
        self, rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
    ) -> torch.Tensor: ...


class PolicyLossFn(Protocol):
    """`fn(logp, old_logp, advantages, mask, cfg) -> (loss[B,T], stats{name: [B,T]})`, not aggregated."""

    def __call__(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        cfg: AlgorithmConfig,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class KLFn(Protocol):
    """`fn(logp[B,T], ref_logp[B,T]) -> kl[B,T]`, a per-token estimate of KL(pi || pi_ref)."""

    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor: ...


class AggregationFn(Protocol):
    """`fn(values[B,T], mask[B,T], norm: LossNorm) -> scalar`, normalised by the GLOBAL batch."""

    def __call__(self, values: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor: ...


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}
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


def register_advantage_estimator(name: str) -> Callable[[F], F]:
    """Decorator: register an AdvantageFn (selected by `algorithm.advantage`)."""
    return register("advantage", name)


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a PolicyLossFn (selected by `algorithm.policy_loss`)."""
    return register("policy_loss", name)


def register_kl_estimator(name: str) -> Callable[[F], F]:
    """Decorator: register a KLFn (selected by `algorithm.kl_estimator`)."""
    return register("kl_estimator", name)


def register_aggregation(name: str) -> Callable[[F], F]:
    """Decorator: register an AggregationFn (selected by `algorithm.loss_agg_mode`)."""
    return register("loss_agg_mode", name)


def get_advantage_estimator(name: str) -> AdvantageFn:
    """The advantage estimator called `name` (ConfigError if unknown)."""
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
