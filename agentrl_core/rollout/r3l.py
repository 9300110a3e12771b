"""R3L (Reflect-then-Retry) rollout: failed attempts reflect, then retry from the step they name.

After a plain round of attempts (`run_episodes`), every failed attempt (not a success, no error)
gets a reflection prompt: its transcript with numbered steps and an instruction to answer with
JSON `{"analysis": str, "retry_step": int, "guidance": str}`. A reflection that does not parse
(checked with `json`, never evaluated) or names a step outside the attempt is data: counted, the
retry skipped. Otherwise a fresh environment is reset with the same task and seed and the
attempt's actions before the pivot step k are re-executed; they must reproduce the recorded
observations, else the retry is skipped. The model then plays from turn k with the guidance
appended to the observation that precedes turn k.

The stored retry is token-exact: the attempt's own ids up to turn k (loss_mask 0), then the ids
generated and observed after the pivot (replies trainable), spliced without the guidance, whose
tokens never appear in `token_ids`. Off-policy note: the log-probs of the retry's replies were
computed by the engine WITH the guidance in context, so they are not log pi(reply | stored
context). R3L trains retries with the OPMD loss, -A * log pi / (1 + tau), which uses no
ratio and so never reads them; `extra["r3l"]["logprobs_context"] = "guided"` records it, and
AlgorithmConfig refuses `tis_cap > 0` with `r3l_retry`.

Retries join their attempt's GRPO group (same `group`, `sample` = attempt's sample + samples
per group), so the group baseline sees them. The reflection itself is not stored or trained.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

from agentrl_core.config import AlgorithmConfig, SamplingConfig
from agentrl_core.envs.base import Env
from agentrl_core.errors import AgentRLError
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.agent_loop import _generate, run_episodes
from agentrl_core.rollout.episode import (
    Episode,
    EpisodeSpec,
    LoopLimits,
    advance,
    close_quietly,
    cut_episode,
)
from agentrl_core.rollout.generation import Engine, Generation
from agentrl_core.rollout.trajectory import Trajectory, observation_key

log = logging.getLogger(__name__)

REFLECT_SYSTEM = "You review a failed attempt of an agent in a text environment and say how to fix it."
REFLECT_INSTRUCTION = (
    "The attempt above failed. Find the first step that went wrong. Reply with only a JSON object: "
    '{{"analysis": "<what went wrong>", "retry_step": <the step number to redo, 0 to {last}>, '
    '"guidance": "<one short instruction for the retry>"}}'
)
GUIDANCE_PREFIX = "\n\nGuidance from reflecting on an earlier attempt: "


class ReflectionError(ValueError):
    """A reflection that does not follow the JSON schema (counted as malformed, never raised out)."""


@dataclass(frozen=True)
class Reflection:
    """A parsed reflection: what went wrong, the turn index to retry from, and the guidance text."""

    analysis: str
    retry_step: int
    guidance: str


@dataclass(frozen=True)
class R3LSettings:
    """The R3L knobs of the rollout (from AlgorithmConfig r3l_*)."""

    max_reflection_tokens: int = 256
    max_retries_per_group: int = 0  # 0 = every failed attempt


# ---- reflection ------------------------------------------------------------------------------


def parse_reflection(text: str, num_turns: int) -> Reflection:
    """The JSON object in `text` (first '{' to last '}'), checked against the schema.

    retry_step must be an int with 0 <= retry_step < num_turns; analysis a string; guidance a
    non-empty string. Raises ReflectionError saying what is wrong.
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ReflectionError("no JSON object in the reflection")
    try:
        obj = json.loads(text[start:end + 1])
    except json.JSONDecodeError as err:
        raise ReflectionError(f"the reflection is not valid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise ReflectionError(f"the reflection is a JSON {type(obj).__name__}, not an object")
    step, analysis, guidance = obj.get("retry_step"), obj.get("analysis"), obj.get("guidance")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ReflectionError(f"retry_step must be an integer, got {step!r}")
    if not 0 <= step < num_turns:
        raise ReflectionError(f"retry_step {step} is outside the attempt's steps 0..{num_turns - 1}")
    if not isinstance(analysis, str):
        raise ReflectionError(f"analysis must be a string, got {type(analysis).__name__}")
    if not isinstance(guidance, str) or not guidance.strip():
        raise ReflectionError("guidance must be a non-empty string")
    return Reflection(analysis.strip(), step, guidance.strip())


def reflection_messages(attempt: Trajectory) -> list[dict[str, str]]:
    """[system, user]: the attempt's transcript with numbered steps, its outcome, the instruction."""
    msgs = attempt.messages
    lines = [f"Agent instructions: {msgs[0]['content']}", f"Task and first observation:\n{msgs[1]['content']}"]
    for i in range(attempt.num_turns):
        lines.append(f"Step {i} action: {msgs[2 + 2 * i]['content']}")
        if 3 + 2 * i < len(msgs):
            lines.append(f"Observation:\n{msgs[3 + 2 * i]['content']}")
    how = "ran out of steps" if attempt.truncated else "ended"
    lines.append(f"Outcome: the episode {how} without success (reward {attempt.reward:g}).")
    lines.append(REFLECT_INSTRUCTION.format(last=attempt.num_turns - 1))
    return [{"role": "system", "content": REFLECT_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def _reflect(engine: Engine, chat: ChatFormat, attempts: list[Trajectory], sampling: SamplingConfig,
             settings: R3LSettings, max_context: int, seed: int) -> list[Reflection | None]:
    """Generate and parse one reflection per attempt (one batch); None where it is unusable.

    The outcome is written to attempt.extra["r3l"]["reflection"]: "ok", "malformed" (with the
    reason), "too_long" (prompt + max_reflection_tokens over max_context) or "engine_failed".
    """
    prompts = [chat.prompt_ids(reflection_messages(a)) for a in attempts]
    fits = [len(p) + settings.max_reflection_tokens <= max_context for p in prompts]
    for a, ok in zip(attempts, fits):
        if not ok:
            a.extra["r3l"]["reflection"] = "too_long"
    todo = [i for i, ok in enumerate(fits) if ok]
    gens = _generate_plain(engine, [prompts[i] for i in todo],
                           sampling.model_copy(update={"max_new_tokens": settings.max_reflection_tokens}), seed)
    out: list[Reflection | None] = [None] * len(attempts)
    for i, gen in zip(todo, gens):
        out[i] = _judge(chat, attempts[i], gen)
    return out


def _generate_plain(engine: Engine, prompts: list[list[int]], sampling: SamplingConfig,
                    seed: int) -> list[Generation | Exception]:
    """One reply per prompt; an engine failure (e.g. out of memory) becomes that batch's result, not a crash."""
    if not prompts:
        return []
    try:
        return list(engine.generate(prompts, sampling, seed))
    except (RuntimeError, ValueError) as err:
        log.exception("engine failed on a batch of %d reflections", len(prompts))
        return [err] * len(prompts)


def _judge(chat: ChatFormat, attempt: Trajectory, gen: Generation | Exception) -> Reflection | None:
    info = attempt.extra["r3l"]
    if isinstance(gen, Exception):
        info["reflection"] = "engine_failed"
        return None
    try:
        reflection = parse_reflection(chat.decode_reply(gen.token_ids), attempt.num_turns)
    except ReflectionError as err:
        info["reflection"], info["reflection_error"] = "malformed", str(err)
        return None
    info["reflection"] = "ok"
    return reflection


# ---- replay and the guided context -------------------------------------------------------------


def turn_starts(traj: Trajectory) -> list[int]:
    """Index in token_ids where each model turn begins: every 0 -> 1 edge of loss_mask."""
    mask = traj.loss_mask
    return [i for i in range(len(mask)) if mask[i] == 1 and (i == 0 or mask[i - 1] == 0)]


def replay(env: Env, attempt: Trajectory, spec: EpisodeSpec, pivot: int) -> list[float] | None:
    """Reset `env` like the attempt and re-execute its actions of turns 0..pivot-1.

    Returns the replayed steps' rewards, or None when an observation differs from the recorded
    one (or the episode ends early): the environment did not reproduce the attempt.
    """
    obs, _info = env.reset(task_id=spec.task_id, seed=spec.seed)
    if obs != attempt.messages[1]["content"]:
        return None
    rewards = []
    for i in range(pivot):
        result = env.step(attempt.messages[2 + 2 * i]["content"])
        if result.terminated or result.truncated or result.observation != attempt.messages[3 + 2 * i]["content"]:
            return None
        rewards.append(float(result.reward))
    return rewards


def _guided_prefix(chat: ChatFormat, attempt: Trajectory, pivot: int, guidance: str,
                   start: int) -> list[int] | None:
    """The attempt's ids before turn `pivot`, with the guidance added to the last observation.

    Only the observation's own ids are re-rendered (the prompt when pivot = 0, else the user turn);
    None when the attempt's ids there are not that rendering (the splice would not be exact).
    """
    msgs = attempt.messages
    observation = msgs[1 + 2 * pivot]["content"]
    if pivot == 0:
        plain, guided = chat.prompt_ids(msgs[:2]), chat.prompt_ids(
            [msgs[0], {"role": "user", "content": observation + GUIDANCE_PREFIX + guidance}])
    else:
        plain, guided = chat.user_turn_ids(observation), chat.user_turn_ids(observation + GUIDANCE_PREFIX + guidance)
    if attempt.token_ids[start - len(plain):start] != plain:
        return None
    return attempt.token_ids[:start - len(plain)] + guided


@dataclass
class _Retry:
    """A retry in flight: the live (guided) episode plus what is needed to store it without guidance."""

    attempt: Trajectory
    reflection: Reflection
    episode: Episode
    stored_prefix: int  # attempt ids kept (turns before the pivot)
    guided_prefix: int  # length of the live context at the pivot


def _open_retry(chat: ChatFormat, env_factory: Callable[[], Env], attempt: Trajectory, spec: EpisodeSpec,
                reflection: Reflection, sample: int) -> _Retry | None:
    """Replay to the pivot and build the guided context; None (reason in attempt.extra) if not possible."""
    info, pivot = attempt.extra["r3l"], reflection.retry_step
    starts = turn_starts(attempt)
    if len(starts) != attempt.num_turns:
        info["retry"] = "skipped_splice"
        return None
    prefix = _guided_prefix(chat, attempt, pivot, reflection.guidance, starts[pivot])
    if prefix is None:
        info["retry"] = "skipped_splice"
        return None
    env = None
    try:
        env = env_factory()
        rewards = replay(env, attempt, spec, pivot)
    except (AgentRLError, OSError) as err:
        info["retry"], info["retry_error"] = "skipped_env", f"{type(err).__name__}: {err}"
        close_quietly(env)
        return None
    if rewards is None:
        info["retry"] = "skipped_replay"
        close_quietly(env)
        return None
    # the pivot's state is the observation without the guidance (the environment's, shared with the attempt)
    state = observation_key(attempt.messages[1 + 2 * pivot]["content"])
    live = _live_trajectory(attempt, sample, pivot, prefix, rewards, reflection)
    return _Retry(attempt, reflection, Episode(live, env, state), starts[pivot], len(prefix))


def _live_trajectory(attempt: Trajectory, sample: int, pivot: int, prefix: list[int], rewards: list[float],
                     reflection: Reflection) -> Trajectory:
    msgs = attempt.messages[:1 + 2 * pivot] + [
        {"role": "user", "content": attempt.messages[1 + 2 * pivot]["content"] + GUIDANCE_PREFIX + reflection.guidance}]
    live = Trajectory(task_id=attempt.task_id, env=attempt.env, group=attempt.group, sample=sample,
                      prompt_len=attempt.prompt_len, messages=msgs, num_turns=pivot, turn_rewards=list(rewards),
                      reward=float(sum(rewards)))
    live.append(prefix, trainable=False)
    return live


# ---- playing and storing the retries -------------------------------------------------------------


def _play(engine: Engine, chat: ChatFormat, retries: list[_Retry], sampling: SamplingConfig, limits: LoopLimits,
          seed: int, pool: ThreadPoolExecutor) -> None:
    """Play every retry from its pivot turn to the end, batched like `run_episodes`."""
    for t in range(limits.max_turns):
        live = [r for r in retries if r.episode.env is not None and r.reflection.retry_step + t < limits.max_turns]
        if not live:
            break
        gens = _generate(engine, [r.episode for r in live], sampling, seed + 1000 * t)
        turns = [r.reflection.retry_step + t for r in live]  # each retry's absolute turn index
        list(pool.map(lambda job: advance(chat, job[0].episode, job[1], limits, job[2]), zip(live, gens, turns)))
    for r in retries:
        if r.episode.env is not None:  # still running after max_turns
            cut_episode(r.episode, "max_turns")


def stored_retry(r: _Retry) -> Trajectory:
    """The retry as it trains: the attempt's ids before the pivot (mask 0), then the live ids after
    the guided context (guidance never included); messages likewise without the guidance."""
    live, attempt, pivot = r.episode.traj, r.attempt, r.reflection.retry_step
    tail = slice(r.guided_prefix, None)
    out = Trajectory(task_id=live.task_id, env=live.env, group=live.group, sample=live.sample,
                     prompt_len=attempt.prompt_len, turn_rewards=live.turn_rewards, reward=live.reward,
                     success=live.success, terminated=live.terminated, truncated=live.truncated,
                     num_turns=live.num_turns, error=live.error,
                     messages=attempt.messages[:2 + 2 * pivot] + live.messages[2 + 2 * pivot:], extra=dict(live.extra))
    out.append(attempt.token_ids[:r.stored_prefix], trainable=False)
    out.token_ids += live.token_ids[tail]
    out.loss_mask += live.loss_mask[tail]
    out.logprobs += live.logprobs[tail]
    # turns before the pivot are the attempt's (masked out); the live ones move with the guidance's removal
    out.action_spans = [list(span) for span in attempt.action_spans[:pivot]]
    out.observation_keys = attempt.observation_keys[:pivot] + live.observation_keys
    shift = r.stored_prefix - r.guided_prefix
    out.action_spans += [[start + shift, end + shift] for start, end in live.action_spans]
    out.extra["r3l"] = {"role": "retry", "pivot": pivot, "parent_sample": attempt.sample,
                        "logprobs_context": "guided", "guidance": r.reflection.guidance,
                        "analysis": r.reflection.analysis}
    return out


# ---- the whole round -------------------------------------------------------------------------------


def _failed(attempts: Sequence[Trajectory], cap: int) -> list[int]:
    """Indices of failed attempts (no success, no error, >= 1 turn), at most `cap` per group (0 = all)."""
    taken: dict[int, int] = {}
    out = []
    for i, a in enumerate(attempts):
        if a.success or a.error is not None or a.num_turns == 0:
            continue
        if cap and taken.get(a.group, 0) >= cap:
            continue
        taken[a.group] = taken.get(a.group, 0) + 1
        out.append(i)
    return out


def run_r3l_episodes(
    engine: Engine, chat: ChatFormat, env_factory: Callable[[], Env], specs: Sequence[EpisodeSpec],
    sampling: SamplingConfig, limits: LoopLimits, settings: R3LSettings, *, seed: int = 0, workers: int = 8,
) -> list[Trajectory]:
    """Attempts (one per spec, in order, extra["r3l"]["role"] = "attempt"), then the retries.

    A retry's sample id is its attempt's sample + (max spec sample + 1), unique within the group.
    """
    attempts = run_episodes(engine, chat, env_factory, specs, sampling, limits, seed=seed, workers=workers)
    for a in attempts:
        a.extra["r3l"] = {"role": "attempt"}
    failed = _failed(attempts, settings.max_retries_per_group)
    reflections = _reflect(engine, chat, [attempts[i] for i in failed], sampling, settings,
                           limits.max_context_tokens, seed + 400_000)
    offset = max((s.sample for s in specs), default=-1) + 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        opened = list(pool.map(
            lambda pair: _open_retry(chat, env_factory, attempts[pair[0]], specs[pair[0]], pair[1],
                                     attempts[pair[0]].sample + offset),
            [(i, r) for i, r in zip(failed, reflections) if r is not None]))
        retries = [r for r in opened if r is not None]
        _play(engine, chat, retries, sampling, limits, seed + 500_000, pool)
    for r in retries:
        r.attempt.extra["r3l"]["retry"] = "done"
    return list(attempts) + [stored_retry(r) for r in retries]


def r3l_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """r3l/* step metrics from the trajectories' extra["r3l"] (empty when none is an R3L trajectory).

    reflections: failed attempts that generated a reflection; malformed_reflections: those that did
    not parse; reflections_skipped: prompt too long for the context, or the engine failed; retries: retries played; retry_success_rate: successes / retries (0 if none);
    skipped_retries: parsed reflections whose retry could not start (replay mismatch, env, splice);
    attempt_success_rate: success rate of first attempts only (comparable to a plain round).
    """
    infos = [(t, t.extra.get("r3l")) for t in trajs]
    attempts = [(t, i) for t, i in infos if i and i.get("role") == "attempt"]
    retries = [t for t, i in infos if i and i.get("role") == "retry"]
    if not attempts and not retries:
        return {}
    states = [i.get("reflection") for _, i in attempts]
    ok_attempts = [t for t, _ in attempts if t.error is None]
    return {
        "r3l/reflections": float(sum(s in ("ok", "malformed") for s in states)),
        "r3l/reflections_skipped": float(sum(s in ("too_long", "engine_failed") for s in states)),
        "r3l/malformed_reflections": float(states.count("malformed")),
        "r3l/retries": float(len(retries)),
        "r3l/retry_success_rate": sum(t.success for t in retries) / len(retries) if retries else 0.0,
        "r3l/skipped_retries": float(sum(str(i.get("retry", "")).startswith("skipped") for _, i in attempts)),
        "r3l/attempt_success_rate": sum(t.success for t in ok_attempts) / max(1, len(ok_attempts)),
    }


def settings_from(algorithm: AlgorithmConfig) -> R3LSettings:
    """R3LSettings from an AlgorithmConfig."""
    return R3LSettings(algorithm.r3l_max_reflection_tokens, algorithm.r3l_max_retries_per_group)
