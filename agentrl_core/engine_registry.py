"""Rollout engines that plugins add (agentrl_core.plugins): kind -> builder, next to the built-in kinds.

    @register_engine("my-engine")
    def build(cfg: EngineConfig, model, tokenizer, **context) -> Engine: ...

A plugin engine samples the model it is given (the trainer's own in-process, the rollout worker's copy on Ray,
into which every new version is copied), and implements the Engine contract (`rollout/generation.py`):
`generate(prompts, sampling, seed) -> list[Generation]` with the sampled tokens' log-probabilities. `context`
holds the factory's other arguments (model_path, autocast, dtype, seed, stop_token_ids); take what you need.
`rollout.engine.kind: my-engine` selects it in a recipe.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

BUILT_IN_KINDS = ("auto", "native", "hf", "vllm", "openai")
ENGINE_BUILDERS: dict[str, Callable[..., Any]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def register_engine(kind: str) -> Callable[[F], F]:
    """Decorator: `builder(cfg, model, tokenizer, **context) -> Engine` under `kind` (not a built-in one)."""
    if kind in BUILT_IN_KINDS:
        raise ValueError(f"rollout engine kind {kind!r} is built in; give yours another name")

    def add(builder: F) -> F:
        if kind in ENGINE_BUILDERS and ENGINE_BUILDERS[kind] is not builder:
            raise ValueError(f"rollout engine kind {kind!r} is already registered (by {ENGINE_BUILDERS[kind].__module__})")
        ENGINE_BUILDERS[kind] = builder
        return builder

    return add


def engine_kinds() -> list[str]:
    """Every kind a recipe may name: the built-in ones, then the plugins'."""
    return [*BUILT_IN_KINDS, *sorted(ENGINE_BUILDERS)]
