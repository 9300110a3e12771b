"""One episode of the agent loop: its spec, its state, and the transitions both loops share."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.episode_metrics import EPISODE_METRICS, check_episode_metrics
from agentrl_core.envs.invalid_action import INVALID_ACTION
from agentrl_core.envs.reward_so_far import REWARD_SO_FAR, check_reward_so_far, credit
from agentrl_core.errors import AgentRLError, PromptTooLongError
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.generation import Generation
from agentrl_core.rollout.trajectory import Trajectory, observation_key

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
class Episode:
    """A trajectory being played and its environment session (None once the episode has ended)."""

    traj: Trajectory
    env: Env | None
    obs_key: str = ""
    """observation_key of the environment's latest observation: the state the next action is taken in."""
    reward_so_far: float | None = None
    """The environment's latest info["reward_so_far"] (envs.reward_so_far), None where it reports none."""


@dataclass(frozen=True)
class LoopLimits:
    """Bounds of one episode: model turns and context tokens."""

    max_turns: int
    max_context_tokens: int


def open_episode(env_factory: Callable[[], Env], chat: ChatFormat, spec: EpisodeSpec, limits: LoopLimits) -> Episode:
    """Create and reset an environment for `spec` and render the opening prompt; a failed reset is
    recorded on the trajectory (`error`) and gives an already-ended episode, and so does an opening prompt of
    `limits.max_context_tokens` or more (`prompt_len` says how long; the loops refuse it: overlong_openings)."""
    env = None
    traj = Trajectory(task_id=spec.task_id, env="", group=spec.group, sample=spec.sample)
    try:
        env = env_factory()
        traj.env = env.name
        obs, _info = env.reset(task_id=spec.task_id, seed=spec.seed)
        # the state is the environment's: samples with and without experience context share it
        state = observation_key(obs)
        if spec.context:  # recorded so the block can be found (and stripped) later
            obs, traj.extra["context"] = f"{obs}\n\n{spec.context}", spec.context
        traj.messages = opening_messages(env, obs)
        traj.append(chat.prompt_ids(traj.messages), trainable=False)
        traj.prompt_len = len(traj.token_ids)
    except (AgentRLError, OSError) as err:
        traj.error = f"reset failed: {type(err).__name__}: {err}"
        close_quietly(env)
        return Episode(traj, None)
    if traj.prompt_len >= limits.max_context_tokens:  # no room for a reply
        traj.error = (f"opening prompt too long: {traj.prompt_len} tokens against rollout.max_context_tokens="
                      f"{limits.max_context_tokens}")
        close_quietly(env)
        return Episode(traj, None)
    return Episode(traj, env, state)


def opening_messages(env: Env, observation: str) -> list[dict[str, str]]:
    """The messages an episode opens with: the environment's system prompt and its first observation."""
    return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": observation}]


def overlong_openings(trajs: Sequence[Trajectory], limits: LoopLimits) -> PromptTooLongError | None:
    """The error for the episodes whose opening prompt reached `limits.max_context_tokens`, None when none did.

    Such an episode has no room for a reply: played anyway, its row would outgrow the limit the memory plan
    sizes training for; ended at once, it would score as a failure the model never had a chance at."""
    over = [t.prompt_len for t in trajs if t.prompt_len >= limits.max_context_tokens]
    if not over:
        return None
    return PromptTooLongError(
        f"{len(over)} of {len(trajs)} episodes opened with a prompt of rollout.max_context_tokens="
        f"{limits.max_context_tokens} tokens or more (the longest {max(over)}), leaving no room for a reply: raise "
        f"rollout.max_context_tokens above the longest prompt plus the replies and observations of the turns to "
        f"play, or shorten the prompt (BFCL: env.kwargs.docs=compact); `python -m agentrl_core.rollout.prompt_fit "
        f"--recipe <recipe>` measures every task's opening prompt before a run")


def refuse_overlong_openings(episodes: Sequence[Episode], limits: LoopLimits) -> None:
    """Raise PromptTooLongError (overlong_openings) when an opening prompt reached the context limit,
    closing every session still open first; the batch is not played on."""
    err = overlong_openings([e.traj for e in episodes], limits)
    if err is not None:
        for e in episodes:
            finish_episode(e)
        raise err


WEIGHT_VERSIONS = "weight_versions"
"""Trajectory.extra key: per model turn, [first, last] policy versions of the weights that generated its
tokens (only where the engine counts them: agentrl_core.distributed.inflight)."""
INVALID_ACTIONS = "invalid_actions"
"""Trajectory.extra key: how many of the episode's commands the environment did not accept (counted when it
says so in info["invalid_action"]; absent for an environment that never does)."""


def advance(chat: ChatFormat, ep: Episode, gen: Generation | Exception, limits: LoopLimits, turn: int) -> None:
    """Append the reply, step the environment, append its observation (or end the episode)."""
    traj = ep.traj
    if isinstance(gen, Exception):
        traj.error = f"engine failed: {type(gen).__name__}: {gen}"
        return finish_episode(ep)
    start = len(traj.token_ids)
    traj.append(gen.token_ids, trainable=True, logprobs=gen.logprobs)
    traj.record_turn(start, ep.obs_key)
    if gen.weight_versions is not None:  # per turn: the versions of its first and last token's weights
        traj.extra.setdefault(WEIGHT_VERSIONS, []).append(list(gen.weight_versions))
    if gen.finish_reason != "stop":  # close the turn so the template stays well-formed
        traj.append([chat.eos_id], trainable=False)
    reply = chat.decode_reply(gen.token_ids)
    traj.messages.append({"role": "assistant", "content": reply})
    traj.num_turns = turn + 1
    try:
        result = ep.env.step(reply)
    except (AgentRLError, OSError) as err:
        traj.error = f"step failed: {type(err).__name__}: {err}"
        return finish_episode(ep)
    try:
        _record(traj, result)
        _note_reward_so_far(ep, result.info)
    except ValueError as err:  # an environment's malformed report is an error, not a silent zero
        traj.error = f"step failed: the environment's info is malformed: {err}"
        return finish_episode(ep)
    if result.terminated or result.truncated:
        return finish_episode(ep)
    _append_observation(chat, ep, result.observation, limits)


def _record(traj: Trajectory, result: StepResult) -> None:
    traj.turn_rewards.append(float(result.reward))
    traj.reward = float(sum(traj.turn_rewards))
    traj.success = bool(result.info.get("success", False))
    traj.terminated, traj.truncated = result.terminated, result.truncated
    if INVALID_ACTION in result.info:
        traj.extra[INVALID_ACTIONS] = traj.extra.get(INVALID_ACTIONS, 0) + bool(result.info[INVALID_ACTION])
    if EPISODE_METRICS in result.info:  # the latest report describes the episode so far
        traj.extra[EPISODE_METRICS] = check_episode_metrics(result.info[EPISODE_METRICS])


def _note_reward_so_far(ep: Episode, info: dict) -> None:
    if REWARD_SO_FAR in info:
        ep.reward_so_far = check_reward_so_far(info[REWARD_SO_FAR], tuple(ep.env.reward_range))


def _append_observation(chat: ChatFormat, ep: Episode, observation: str, limits: LoopLimits) -> None:
    ids = chat.user_turn_ids(observation)
    if len(ep.traj.token_ids) + len(ids) >= limits.max_context_tokens:
        return cut_episode(ep, "context")
    ep.traj.append(ids, trainable=False)
    ep.traj.messages.append({"role": "user", "content": observation})
    ep.obs_key = observation_key(observation)


TRUNCATED_BY = "truncated_by"
"""Trajectory.extra key: why the agent loop cut the episode off ("context" or "max_turns")."""


def cut_episode(ep: Episode, by: str) -> None:
    """End an episode the loop cuts off before the environment ended it (`by`: "context" when the next
    observation would not fit, "max_turns" when every turn was played): truncated, and its reward is what
    the environment reported it had earned so far, where it reports that (envs.reward_so_far)."""
    traj = ep.traj
    traj.truncated = True
    traj.extra[TRUNCATED_BY] = by
    if ep.reward_so_far is not None and traj.turn_rewards:
        credit(traj.turn_rewards, ep.reward_so_far)
        traj.reward = ep.reward_so_far
    finish_episode(ep)


def finish_episode(ep: Episode) -> None:
    """End the episode: close its environment session."""
    close_quietly(ep.env)
    ep.env = None


def close_quietly(env: Env | None) -> None:
    """Close a session, logging (not raising) a failure: the episode is over either way."""
    if env is None:
        return
    try:
        env.close()
    except (AgentRLError, OSError):  # the episode is over; a failed close only leaks a session
        log.warning("closing an environment session failed", exc_info=True)
