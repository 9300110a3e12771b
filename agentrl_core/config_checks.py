"""Cross-field checks of a recipe: names that must exist in a registry."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from agentrl_core.errors import ConfigError

if TYPE_CHECKING:
    from agentrl_core.config import RecipeConfig


def _check_in(kind: str, name: str, valid: list[str]) -> None:
    if name not in valid:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def _check_env_kwargs(cls: type, kwargs: dict) -> None:
    signature = inspect.signature(cls)
    try:
        signature.bind(**kwargs)
    except TypeError as err:
        valid = [p for p in signature.parameters if p not in ("self", "args", "kwargs")]
        raise ConfigError(f"env.kwargs {sorted(kwargs)} do not fit {cls.__name__}: {err}; valid: {', '.join(valid)}") from None


def check_registered_names(cfg: "RecipeConfig") -> None:
    """Fail at construction when an environment or algorithm name is not registered."""
    from agentrl_core import algorithms, envs

    _check_in("env.name", cfg.env.name, envs.names())
    _check_env_kwargs(envs.env_class(cfg.env.name), cfg.env.kwargs)
    _check_in("algorithm.advantage", cfg.algorithm.advantage, list(algorithms.ADVANTAGE_ESTIMATORS))
    _check_in("algorithm.policy_loss", cfg.algorithm.policy_loss, list(algorithms.POLICY_LOSSES))
    _check_in("algorithm.loss_agg_mode", cfg.algorithm.loss_agg_mode, list(algorithms.AGGREGATIONS))
    _check_in("algorithm.kl_estimator", cfg.algorithm.kl_estimator, list(algorithms.KL_ESTIMATORS))
