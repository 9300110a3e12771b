"""Build the rollout engine `rollout.engine` names: hf (in-process transformers), vllm, or openai (HTTP)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl_core.config import EngineConfig
from agentrl_core.errors import ConfigError
from agentrl_core.rollout.engine import Engine, HFEngine


def make_engine(cfg: EngineConfig, model: Any, tokenizer: Any, *, model_path: str | Path | None = None,
                served_model: str | None = None, api_key: str | None = None, autocast: str = "float32",
                dtype: str = "bfloat16", seed: int = 0, stop_token_ids: Sequence[int] = ()) -> Engine:
    """The engine for `cfg.kind`.

    hf: samples with `model` (the trainer's own, so it is always current). vllm: loads its own
    copy from `model_path` (a HF folder; sync later weights with `update_weights`). openai: talks
    to `cfg.url` as `served_model` (default: the model path's name), re-tokenizing nothing.
    `max_batch` comes from `cfg.max_batch` when set, else each engine's default.
    """
    batch = {"max_batch": cfg.max_batch} if cfg.max_batch is not None else {}
    if cfg.kind == "hf":
        return HFEngine(model, tokenizer, stop_token_ids=stop_token_ids, autocast=autocast, **batch)
    if cfg.kind == "vllm":
        if model_path is None:
            raise ConfigError("rollout.engine.kind=vllm loads the model itself: pass model_path (a HF folder)")
        from agentrl_core.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(str(model_path), tokenizer, cfg, dtype=dtype, seed=seed, stop_token_ids=stop_token_ids)
    if cfg.kind == "openai":
        if not cfg.url:
            raise ConfigError("rollout.engine.kind=openai needs rollout.engine.url (e.g. http://127.0.0.1:8001/v1)")
        from agentrl_core.rollout.openai_engine import OpenAIEngine

        name = served_model or (Path(model_path).name if model_path is not None else None)
        if not name:
            raise ConfigError("rollout.engine.kind=openai needs the served model's name (served_model or model_path)")
        return OpenAIEngine(cfg.url, name, api_key, tokenizer=tokenizer, **batch)
    raise ConfigError(f"rollout.engine.kind={cfg.kind!r} is not one of hf, vllm, openai")
