"""The multi-turn agent loop: engine turns and environment turns, spliced as token ids."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

from agentrl_core.config import SamplingConfig
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.errors import AgentRLError
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.engine import Engine, Generation
from agentrl_core.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeSpec:
    """Which task to play, in which GRPO group, as which sample, with which env seed."""

    task_id: int
    group: int = 0
    sample: int = 0
    seed: int | None = None
    context: str | None = None
    """Text appended to the first observation (e.g. retrieved experience, experience/mixing.py)."""


@dataclass
class _Episode:
    traj: Trajectory
    env: Env | None


@dataclass(frozen=True)
class LoopLimits:
    """Bounds of one episode: model turns and context tokens."""

    max_turns: int
    max_context_tokens: int


def run_episodes(
    engine: Engine, chat: ChatFormat, env_factory: Callable[[], Env], specs: Sequence[EpisodeSpec],
    sampling: SamplingConfig, limits: LoopLimits, *, seed: int = 0, workers: int = 8,
    on_turn: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Play every spec to the end; returns one trajectory per spec, in order.

    Each turn generates for all live episodes in one batch, then steps their environments in
    parallel. A failure of one environment ends that episode with `error` set; the batch goes on.
    """
    with ThreadPoolExecutor(max_workers=workers) as pool:
        episodes = list(pool.map(lambda s: _open(env_factory, chat, s), specs))
        for turn in range(limits.max_turns):
            live = [e for e in episodes if e.env is not None]
            if not live:
                break
            gens = _generate(engine, live, sampling, seed + 1000 * turn)
            list(pool.map(lambda pair: _advance(chat, pair[0], pair[1], limits, turn), zip(live, gens)))
            if on_turn is not None:
                on_turn(turn, len(live))
        for e in episodes:
            if e.env is not None:  # still running after max_turns
                e.traj.truncated = True
                _finish(e)
    return [e.traj for e in episodes]


def _open(env_factory: Callable[[], Env], chat: ChatFormat, spec: EpisodeSpec) -> _Episode:
    env = None
    traj = Trajectory(task_id=spec.task_id, env="", group=spec.group, sample=spec.sample)
    try:
        env = env_factory()
        traj.env = env.name
        obs, _info = env.reset(task_id=spec.task_id, seed=spec.seed)
        if spec.context:  # recorded so the block can be found (and stripped) later
            obs, traj.extra["context"] = f"{obs}\n\n{spec.context}", spec.context
        traj.messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
        traj.append(chat.prompt_ids(traj.messages), trainable=False)
        traj.prompt_len = len(traj.token_ids)
    except (AgentRLError, OSError) as err:
        traj.error = f"reset failed: {type(err).__name__}: {err}"
        _close_quietly(env)
        return _Episode(traj, None)
    return _Episode(traj, env)


def _generate(engine: Engine, live: list[_Episode], sampling: SamplingConfig, seed: int) -> list[Generation | Exception]:
    try:
        return list(engine.generate([e.traj.token_ids for e in live], sampling, seed))
    except (RuntimeError, ValueError) as err:  # e.g. out of memory: fail these episodes, keep the run
        log.exception("engine failed on a batch of %d episodes", len(live))
        return [err] * len(live)


def _advance(chat: ChatFormat, ep: _Episode, gen: Generation | Exception, limits: LoopLimits, turn: int) -> None:
    """Append the reply, step the environment, append its observation (or end the episode)."""
    traj = ep.traj
    if isinstance(gen, Exception):
        traj.error = f"engine failed: {type(gen).__name__}: {gen}"
        return _finish(ep)
    traj.append(gen.token_ids, trainable=True, logprobs=gen.logprobs)
    if gen.finish_reason != "stop":  # close the turn so the template stays well-formed
        traj.append([chat.eos_id], trainable=False)
    reply = chat.decode_reply(gen.token_ids)
    traj.messages.append({"role": "assistant", "content": reply})
    traj.num_turns = turn + 1
    try:
        result = ep.env.step(reply)
    except (AgentRLError, OSError) as err:
        traj.error = f"step failed: {type(err).__name__}: {err}"
        return _finish(ep)
    _record(traj, result)
    if result.terminated or result.truncated:
        return _finish(ep)
    _append_observation(chat, ep, result.observation, limits)


def _record(traj: Trajectory, result: StepResult) -> None:
    traj.turn_rewards.append(float(result.reward))
    traj.reward = float(sum(traj.turn_rewards))
    traj.success = bool(result.info.get("success", False))
    traj.terminated, traj.truncated = result.terminated, result.truncated


def _append_observation(chat: ChatFormat, ep: _Episode, observation: str, limits: LoopLimits) -> None:
    ids = chat.user_turn_ids(observation)
    if len(ep.traj.token_ids) + len(ids) >= limits.max_context_tokens:
        ep.traj.truncated = True
        ep.traj.extra["truncated_by"] = "context"
        return _finish(ep)
    ep.traj.append(ids, trainable=False)
    ep.traj.messages.append({"role": "user", "content": observation})


def _finish(ep: _Episode) -> None:
    _close_quietly(ep.env)
    ep.env = None


def _close_quietly(env: Env | None) -> None:
    if env is None:
        return
    try:
        env.close()
    except (AgentRLError, OSError):  # the episode is over; a failed close only leaks a session
        log.warning("closing an environment session failed", exc_info=True)
