"""Build the rollout engine `rollout.engine` names: native or hf (in-process), vllm, or openai (HTTP)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl_core.config import EngineConfig
from agentrl_core.errors import ConfigError
from agentrl_core.engine_registry import ENGINE_BUILDERS, engine_kinds
from agentrl_core.rollout.generation import Engine
from agentrl_core.rollout.hf_engine import HFEngine
from agentrl_core.rollout.native import NativeEngine, native_support
from agentrl_core.rollout.native.engine import default_kv_cache_mb

log = logging.getLogger(__name__)


def resolve_kind(cfg: EngineConfig, model: Any, *, allow_native: bool = True) -> str:
    """The engine kind to build: `cfg.kind`, with auto resolved to native where the native engine runs
    `model` (and `allow_native`, false under DeepSpeed), else hf; the choice and its reason are logged."""
    if cfg.kind != "auto":
        return cfg.kind
    why = "the trainer runs DeepSpeed" if not allow_native else native_support(model) if model is not None else "no model"
    if why is None:
        log.info("rollout engine: native (KV caches kept across turns, continuous batching)")
        return "native"
    log.info("rollout engine: hf (the native engine is not used: %s)", why)
    return "hf"


def make_engine(cfg: EngineConfig, model: Any, tokenizer: Any, *, model_path: str | Path | None = None,
                served_model: str | None = None, api_key: str | None = None, autocast: str = "float32",
                dtype: str = "bfloat16", seed: int = 0, stop_token_ids: Sequence[int] = (),
                allow_native: bool = True) -> Engine:
    """The engine for `cfg.kind` (auto: see `resolve_kind`).

    native and hf sample with `model` (the trainer's own, so it is always current; native drops its
    KV caches when the weights change). vllm: loads its own copy from `model_path` (a HF folder; sync
    later weights with `update_weights`). openai: talks to `cfg.url` as `served_model` (default: the
    model path's name), re-tokenizing nothing. `max_batch` comes from `cfg.max_batch` when set, else
    each engine's default.
    """
    batch = {"max_batch": cfg.max_batch} if cfg.max_batch is not None else {}
    kind = resolve_kind(cfg, model, allow_native=allow_native)
    if kind == "native":
        why = native_support(model)
        if why is not None:
            raise ConfigError(f"rollout.engine.kind=native cannot run this model ({why}); use rollout.engine.kind=hf")
        return NativeEngine(model, tokenizer, stop_token_ids=stop_token_ids, autocast=autocast,
                            kv_cache_mb=cfg.kv_cache_mb or default_kv_cache_mb(), max_step_tokens=cfg.max_step_tokens,
                            **batch)
    if kind == "hf":
        return HFEngine(model, tokenizer, stop_token_ids=stop_token_ids, autocast=autocast, **batch)
    if kind == "vllm":
        if model_path is None:
            raise ConfigError("rollout.engine.kind=vllm loads the model itself: pass model_path (a HF folder)")
        from agentrl_core.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(str(model_path), tokenizer, cfg, dtype=dtype, seed=seed, stop_token_ids=stop_token_ids)
    if kind == "openai":
        if not cfg.url:
            raise ConfigError("rollout.engine.kind=openai needs rollout.engine.url (e.g. http://127.0.0.1:8001/v1)")
        from agentrl_core.rollout.openai_engine import OpenAIEngine

        name = served_model or (Path(model_path).name if model_path is not None else None)
        if not name:
            raise ConfigError("rollout.engine.kind=openai needs the served model's name (served_model or model_path)")
        from agentrl_core.secrets import reveal

        return OpenAIEngine(reveal(cfg.url, "rollout.engine.url"), name, api_key, tokenizer=tokenizer, **batch)
    if kind in ENGINE_BUILDERS:  # a plugin's (agentrl_core/plugins.py): it samples `model`, as hf does
        return ENGINE_BUILDERS[kind](cfg, model, tokenizer, model_path=model_path, autocast=autocast, dtype=dtype,
                                     seed=seed, stop_token_ids=stop_token_ids)
    raise ConfigError(f"rollout.engine.kind={cfg.kind!r} is not one of {', '.join(engine_kinds())} (a plugin "
                      "package adds its own: agentrl_core/plugins.py)")

from agentrl_core.plugins import load_plugins  # noqa: E402

load_plugins()  # users' own envs, estimators, losses and engines (agentrl_core/plugins.py), once per process
