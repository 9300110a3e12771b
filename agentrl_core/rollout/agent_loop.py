"""The multi-turn agent loop: engine turns and environment turns, spliced as token ids."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from agentrl_core.config import SamplingConfig
from agentrl_core.envs.base import Env
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.continuous import run_continuous
from agentrl_core.rollout.generation import Engine, Generation
from agentrl_core.rollout.episode import (
    EpisodeSpec, LoopLimits, advance, Episode, cut_episode, open_episode, refuse_overlong_openings,
)
from agentrl_core.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

__all__ = ["EpisodeSpec", "LoopLimits", "run_episodes"]


def run_episodes(
    engine: Engine, chat: ChatFormat, env_factory: Callable[[], Env], specs: Sequence[EpisodeSpec],
    sampling: SamplingConfig, limits: LoopLimits, *, seed: int = 0, workers: int = 8,
    on_turn: Callable[[int, int], None] | None = None, max_live: int | None = None,
) -> list[Trajectory]:
    """Play every spec to the end; returns one trajectory per spec, in order.

    An engine that supports it (`engine.continuous`, the native engine) runs the continuous loop
    (agentrl_core.rollout.continuous): episodes generate and step their environments on their own
    clocks. Any other engine runs in lock-step: each turn generates for all live episodes in one
    batch, then steps their environments in parallel. Either way a failure of one environment ends
    that episode with `error` set; the batch goes on. An opening prompt of `limits.max_context_tokens` or
    more is a setting to fix, not an episode to score: PromptTooLongError (episode.overlong_openings).

    `max_live`: at most this many episodes (env sessions) open at once — the continuous loop opens the next
    as one ends (default there: the engine's max_batch); the lock-step loop plays the specs in waves of
    `max_live`, one after the other (default: one wave).
    """
    if getattr(engine, "continuous", False):
        return run_continuous(engine, chat, env_factory, specs, sampling, limits, seed=seed, workers=workers,
                              on_turn=on_turn, max_live=max_live)
    if max_live is not None and max_live < 1:
        raise ValueError(f"max_live must be >= 1, got {max_live}")
    size = max_live or max(1, len(specs))
    trajs: list[Trajectory] = []
    for wave in range(0, len(specs), size):
        trajs += _lock_step(engine, chat, env_factory, specs[wave:wave + size], sampling, limits, seed, workers,
                            on_turn)
    return trajs


def _lock_step(
    engine: Engine, chat: ChatFormat, env_factory: Callable[[], Env], specs: Sequence[EpisodeSpec],
    sampling: SamplingConfig, limits: LoopLimits, seed: int, workers: int,
    on_turn: Callable[[int, int], None] | None,
) -> list[Trajectory]:
    """Every spec at once: each turn one generate() for the live episodes, then their env steps in parallel."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        episodes = list(pool.map(lambda s: open_episode(env_factory, chat, s, limits), specs))
        refuse_overlong_openings(episodes, limits)
        for turn in range(limits.max_turns):
            live = [e for e in episodes if e.env is not None]
            if not live:
                break
            gens = _generate(engine, live, sampling, seed + 1000 * turn)
            list(pool.map(lambda pair: advance(chat, pair[0], pair[1], limits, turn), zip(live, gens)))
            if on_turn is not None:
                on_turn(turn, len(live))
        for e in episodes:
            if e.env is not None:  # still running after max_turns
                cut_episode(e, "max_turns")
    return [e.traj for e in episodes]


def _generate(engine: Engine, live: list[Episode], sampling: SamplingConfig, seed: int) -> list[Generation | Exception]:
    try:
        return list(engine.generate([e.traj.token_ids for e in live], sampling, seed))
    except (RuntimeError, ValueError) as err:  # e.g. out of memory: fail these episodes, keep the run
        log.exception("engine failed on a batch of %d episodes", len(live))
        return [err] * len(live)


