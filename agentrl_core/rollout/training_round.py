"""One training round of episodes, wherever it is played (in-process or on a rollout worker): R3L when on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentrl_core.config import RecipeConfig, SamplingConfig
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.agent_loop import run_episodes
from agentrl_core.rollout.episode import EpisodeSpec, LoopLimits
from agentrl_core.rollout.r3l import run_r3l_episodes, settings_from
from agentrl_core.rollout.trajectory import Trajectory


def play_round(engine: Any, chat: ChatFormat, env_factory: Callable[[], Any], specs: Sequence[EpisodeSpec], seed: int,
               cfg: RecipeConfig, sampling: SamplingConfig | None = None, max_live: int | None = None,
               ) -> list[Trajectory]:
    """Every spec played with the recipe's limits and sampling (or `sampling`, e.g. the evaluation's); with
    algorithm.r3l_retry (and the rollout's own sampling), failed attempts reflect and retry within their group."""
    limits = LoopLimits(cfg.env.max_turns, cfg.rollout.max_context_tokens)
    if cfg.algorithm.r3l_retry and sampling is None:
        return run_r3l_episodes(engine, chat, env_factory, specs, cfg.rollout.sampling, limits,
                                settings_from(cfg.algorithm), seed=seed)
    return run_episodes(engine, chat, env_factory, list(specs), sampling or cfg.rollout.sampling, limits, seed=seed,
                        max_live=max_live)
