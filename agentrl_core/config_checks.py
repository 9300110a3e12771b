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


def _check_extra(env_cls: type) -> None:
    """An env whose optional engine is missing fails at construction, naming the install command."""
    missing = env_cls.missing_extra()
    if missing:
        raise ConfigError(f"env.name: {missing}")


def check_registered_names(cfg: "RecipeConfig") -> None:
    """Fail at construction when an environment or algorithm name is not registered."""
    from agentrl_core import algorithms, envs
    from agentrl_core.envs.registry import versioned_ids

    _check_in("env.name", cfg.env.name, envs.names() + versioned_ids())
    env_cls = envs.env_class(cfg.env.name)
    _check_env_kwargs(env_cls, cfg.env.kwargs)
    _check_extra(env_cls)
    _check_in("algorithm.advantage", cfg.algorithm.advantage, list(algorithms.ADVANTAGE_ESTIMATORS))
    _check_in("algorithm.policy_loss", cfg.algorithm.policy_loss, list(algorithms.POLICY_LOSSES))
    _check_in("algorithm.loss_agg_mode", cfg.algorithm.loss_agg_mode, list(algorithms.AGGREGATIONS))
    _check_in("algorithm.kl_estimator", cfg.algorithm.kl_estimator, list(algorithms.KL_ESTIMATORS))


def check_combinations(cfg: "RecipeConfig") -> None:
    """Fail at construction on settings that cannot run together (instead of mid-run)."""
    if cfg.algorithm.r3l_retry and cfg.experience.enabled:
        raise ConfigError("experience.enabled cannot be combined with algorithm.r3l_retry yet: R3L replays an attempt "
                          "by comparing its first message (which would hold the experience block) with a fresh "
                          "reset; set one of them to false")
    if cfg.distributed.backend == "ray":
        unsupported = {"model.lora.enabled": cfg.model.lora.enabled,
                       "algorithm.dynamic_sampling": cfg.algorithm.dynamic_sampling,
                       "algorithm.r3l_retry": cfg.algorithm.r3l_retry, "experience.enabled": cfg.experience.enabled,
                       "trainer.backend=deepspeed": cfg.trainer.backend == "deepspeed",
                       f"rollout.engine.kind={cfg.rollout.engine.kind}": cfg.rollout.engine.kind != "hf"}
        for name, on in unsupported.items():
            if on:
                raise ConfigError(f"{name} is not supported with distributed.backend=ray yet (the Ray workers run "
                                  "plain HF rollouts and a torch trainer); use distributed.backend=local or turn it off")
