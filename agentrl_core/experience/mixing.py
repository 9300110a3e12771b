"""The `mixed` rollout mode: which samples get retrieved experience, the block they get, and its removal.

Of a GRPO group of n samples, m = floor(ratio * n + 0.5) get experience (ratio 0.5: half), chosen
by a seeded draw per (seed, group), so a resumed step chooses the same. Their first user message
ends with a block
    Relevant experience:
    - <lesson 1>
    - <lesson 2>
(`EpisodeSpec.context`, appended by the agent loop, which records it in `traj.extra["context"]`).

Keeping vs stripping (`keep_in_context`): stripping rebuilds the stored trajectory as if the block
had never been there: the prompt ids (the first `prompt_len` tokens, all loss mask 0) are replaced
by the chat template rendered over the message without the block; every later token — model
turns, their engine log-probs, environment turns — is kept id for id (the loop splices turns
after the prompt without re-tokenising, so they do not depend on it). The engine log-probs were
computed WITH the experience in context, so for the stripped context the data is off-policy:
the trainer's old log-probs (policy_update: with ppo_epochs = 1 they are the current policy's,
detached, so the ratio is 1; with more, one no-grad pass on the stored — stripped — tokens) do
not see the block, and `rollout_logp_diff` / TIS (tis_cap > 0) measure or correct the gap against
the engine's with-experience log-probs. Context-distillation style: the policy learns to act as
if it had the lesson.
"""

from __future__ import annotations

import logging
import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from agentrl_core.errors import AgentRLError
from agentrl_core.rollout.agent_loop import EpisodeSpec
from agentrl_core.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

HEADER = "Relevant experience:"
_SEP = "\n\n"  # what the agent loop puts between the observation and the context


def experience_count(n: int, ratio: float) -> int:
    """m = floor(ratio * n + 0.5): how many of a group's n samples get experience."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"rollout_ratio must be in [0, 1], got {ratio}")
    return min(n, math.floor(ratio * n + 0.5))


def choose_samples(specs: Sequence[EpisodeSpec], ratio: float, seed: int) -> list[bool]:
    """For each spec, whether it gets experience: exactly experience_count(n, ratio) per group,
    drawn by random.Random(seed * 1_000_003 + group) over the group's specs in order."""
    groups: dict[int, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.group, []).append(i)
    chosen = [False] * len(specs)
    for group, members in groups.items():
        rng = random.Random(seed * 1_000_003 + group)
        for i in rng.sample(members, experience_count(len(members), ratio)):
            chosen[i] = True
    return chosen


def render_block(lessons: Sequence[str]) -> str | None:
    """"Relevant experience:\\n- a\\n- b" (each lesson on one line), or None when there is none."""
    lines = [" ".join(text.split()) for text in lessons]
    lines = [line for line in lines if line]
    return HEADER + "".join(f"\n- {line}" for line in lines) if lines else None


def block_size(block: str | None) -> int:
    """How many lessons a rendered block holds."""
    return 0 if not block else sum(line.startswith("- ") for line in block.split("\n")[1:])


def first_observations(env_factory: Callable[[], Any], task_ids: Sequence[int], workers: int = 8) -> dict[int, str]:
    """The opening observation of each task (the retrieval query), from a fresh env reset and closed.

    A task whose reset fails is left out (logged): its samples get no experience, and their own
    reset in the agent loop records the failure on their trajectories.
    """

    def one(task_id: int) -> str | None:
        env = None
        try:
            env = env_factory()
            return env.reset(task_id=task_id)[0]
        except (AgentRLError, OSError):
            log.warning("task %d: reset for the experience query failed; its samples get no experience",
                        task_id, exc_info=True)
            return None
        finally:
            _close_quietly(env)

    ids = list(dict.fromkeys(task_ids))
    if not ids:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ids)))) as pool:
        return {i: obs for i, obs in zip(ids, pool.map(one, ids)) if obs is not None}


def _close_quietly(env: Any) -> None:
    if env is None:
        return
    try:
        env.close()
    except (AgentRLError, OSError):  # the query is taken; a failed close only leaks a session
        log.warning("closing the env used for an experience query failed", exc_info=True)


def with_experience(specs: Sequence[EpisodeSpec], chosen: Sequence[bool],
                    blocks: Mapping[int, str | None]) -> list[EpisodeSpec]:
    """The specs with `context` set to their task's block where chosen (and a block exists)."""
    return [replace(s, context=blocks.get(s.task_id)) if c else s for s, c in zip(specs, chosen)]


def original_messages(traj: Trajectory) -> list[dict[str, str]]:
    """The trajectory's messages with the context block removed from its first user message."""
    messages = [dict(m) for m in traj.messages]
    context = traj.extra.get("context")
    if context and len(messages) > 1 and not traj.extra.get("context_stripped"):
        suffix = _SEP + context
        if not messages[1]["content"].endswith(suffix):
            raise ValueError(f"task {traj.task_id}: the first user message does not end with its recorded context")
        messages[1]["content"] = messages[1]["content"][: -len(suffix)]
    return messages


def strip_context(traj: Trajectory, chat: Any) -> bool:
    """Rebuild `traj` without its context block (see the module docstring); False if it had none.

    Checks that the stored prompt is the template over [system, user-with-block] before replacing it.
    """
    if not traj.extra.get("context") or traj.extra.get("context_stripped") or traj.prompt_len == 0:
        return False
    if chat.prompt_ids(traj.messages[:2]) != traj.token_ids[: traj.prompt_len]:
        raise ValueError(f"task {traj.task_id} sample {traj.sample}: the stored prompt is not the chat template over "
                         "its first two messages, so the block cannot be removed token-exactly")
    messages = original_messages(traj)
    prompt = chat.prompt_ids(messages[:2])
    rest = traj.prompt_len
    traj.token_ids = prompt + traj.token_ids[rest:]
    traj.loss_mask = [0] * len(prompt) + traj.loss_mask[rest:]
    traj.logprobs = [0.0] * len(prompt) + traj.logprobs[rest:]
    traj.shift_spans(len(prompt) - rest)
    traj.prompt_len = len(prompt)
    traj.messages = messages
    traj.extra["context_stripped"] = True
    return True


def experience_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Success and reward of the samples with vs without experience (errored ones excluded; NaN if none),
    and the mean number of lessons in a block."""
    ok = [t for t in trajs if t.error is None]
    with_ = [t for t in ok if t.extra.get("context")]
    without = [t for t in ok if not t.extra.get("context")]

    def mean(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    return {
        "exp/with_success": mean([float(t.success) for t in with_]),
        "exp/without_success": mean([float(t.success) for t in without]),
        "exp/with_reward": mean([t.reward for t in with_]),
        "exp/without_reward": mean([t.reward for t in without]),
        "exp/with_samples": float(len(with_)),
        "exp/retrieved": mean([float(block_size(t.extra["context"])) for t in with_]),
    }
