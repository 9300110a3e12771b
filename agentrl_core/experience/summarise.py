"""Summarisers: a trajectory in, a short reusable lesson (an experience record) out.

The rule-based summariser keeps what worked: the task, then the actions of a successful episode
in order, object names kept ("go to fridge 1 -> open fridge 1 -> take cup 1 from fridge 1 ..."),
consecutive repeats collapsed. From a failed one it can write "what not to do". The model-based
summariser asks any rollout engine for JSON {"when_to_use", "experience"}, parses it with `json`
(never eval) and drops — and counts — replies that are not that.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)

MAX_WHEN_CHARS = 1000
MAX_ACTIONS = 30
FAILURE_TAIL = 10
_GOAL = re.compile(r"^\s*(?:your\s+)?(?:task|goal|instruction|question)\s*(?:is)?\s*:\s*(.+?)\s*$", re.I | re.M)


@dataclass(frozen=True)
class ExperienceRecord:
    """One lesson: `when_to_use` is the situation it applies to (embedded for retrieval), `content`
    the lesson itself (shown to the agent), `score` the reward of the trajectory it came from."""

    env: str
    task_id: int | None
    when_to_use: str
    content: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _field(traj: Any, name: str) -> Any:
    return traj[name] if isinstance(traj, Mapping) else getattr(traj, name)


def _messages(traj: Any) -> list[tuple[str, str]]:
    out = []
    for m in _field(traj, "messages"):
        role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else (m.role, m.content)
        out.append((str(role), str(content)))
    return out


def task_observation(messages: Sequence[tuple[str, str]]) -> str:
    """The first user message: the task as the agent first saw it."""
    for role, content in messages:
        if role == "user":
            return content.strip()
    raise ValueError("the trajectory has no user message, so there is no task to summarise")


def goal_text(observation: str) -> str:
    """The goal line of an observation ("Your task: X" / "Goal: X" → X), else its first non-empty line."""
    found = _GOAL.search(observation)
    if found:
        return found.group(1).rstrip(".")
    first = next((line.strip() for line in observation.splitlines() if line.strip()), "")
    return first[:200]


def action_sequence(messages: Sequence[tuple[str, str]]) -> list[str]:
    """The assistant's actions in order, blank ones dropped and consecutive repeats collapsed."""
    actions: list[str] = []
    for role, content in messages:
        text = " ".join(content.split())
        if role == "assistant" and text and (not actions or actions[-1] != text):
            actions.append(text)
    return actions


def _shorten(actions: list[str], limit: int = MAX_ACTIONS) -> str:
    if len(actions) <= limit:
        return " -> ".join(actions)
    half = limit // 2
    return " -> ".join(actions[:half] + ["..."] + actions[-(limit - half):])


def summarise_trajectory(traj: Any, *, include_failures: bool = False, min_score: float = 0.0) -> ExperienceRecord | None:
    """The rule-based lesson of one trajectory (a mapping or an object with env, task_id, messages,
    reward, success), or None when there is nothing to learn: failed (unless include_failures),
    reward below `min_score`, or no action at all.

    Success: "Task: G. What worked (n actions, reward r): a1 -> a2 -> ...".
    Failure: "Task: G. A failed attempt (n actions, reward r) ended with: ...; do not repeat it."
    """
    messages = _messages(traj)
    obs = task_observation(messages)
    actions = action_sequence(messages)
    reward, success = float(_field(traj, "reward")), bool(_field(traj, "success"))
    if not actions or (success and reward < min_score) or (not success and not include_failures):
        return None
    goal = goal_text(obs)
    if success:
        content = f"Task: {goal}. What worked ({len(actions)} actions, reward {reward:g}): {_shorten(actions)}."
    else:
        tail = " -> ".join(actions[-FAILURE_TAIL:])
        content = (f"Task: {goal}. A failed attempt ({len(actions)} actions, reward {reward:g}) ended with: "
                   f"{tail}. Do not repeat this; try a different approach.")
    return ExperienceRecord(env=str(_field(traj, "env")), task_id=_field(traj, "task_id"),
                            when_to_use=obs[:MAX_WHEN_CHARS], content=content, score=reward)


_SYSTEM = "You distil reusable lessons from an agent's episodes. Reply with one JSON object only."
_INSTRUCTION = (
    'Write a JSON object with two string fields: "when_to_use" (the kind of task this lesson helps with) and '
    '"experience" (one or two sentences: what to do, or what to avoid, keeping object names).'
)


def transcript(messages: Sequence[tuple[str, str]], max_chars: int) -> str:
    """The episode as text ("USER: ...", "ASSISTANT: ...", system prompt left out), its end kept if too long."""
    text = "\n".join(f"{role.upper()}: {content}" for role, content in messages if role != "system")
    return text if len(text) <= max_chars else "...\n" + text[-max_chars:]


def parse_model_reply(reply: str) -> tuple[str, str] | None:
    """(when_to_use, experience) from the first {...} JSON object in a reply, or None if there is none
    or it lacks either non-empty string field. Parsed with json.loads only."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        obj = json.loads(reply[start:end + 1])
    except json.JSONDecodeError:
        return None
    when, lesson = (obj.get("when_to_use"), obj.get("experience")) if isinstance(obj, dict) else (None, None)
    if not (isinstance(when, str) and isinstance(lesson, str) and when.strip() and lesson.strip()):
        return None
    return when.strip(), lesson.strip()


class ModelSummariser:
    """Lessons written by a model through any `Engine` (greedy), one per trajectory worth keeping.

    `malformed` counts replies that were not the JSON asked for; they give no experience.
    """

    def __init__(self, engine: Any, chat: Any, *, max_new_tokens: int = 160, max_transcript_chars: int = 4000,
                 include_failures: bool = False, min_score: float = 0.0, seed: int = 0) -> None:
        self.engine, self.chat = engine, chat
        self.max_new_tokens, self.max_transcript_chars = max_new_tokens, max_transcript_chars
        self.include_failures, self.min_score, self.seed = include_failures, min_score, seed
        self.malformed = 0

    def _wanted(self, traj: Any) -> bool:
        success, reward = bool(_field(traj, "success")), float(_field(traj, "reward"))
        return (success and reward >= self.min_score) or (not success and self.include_failures)

    def _prompt(self, traj: Any) -> list[int]:
        outcome = "succeeded" if _field(traj, "success") else "failed"
        body = (f"The episode {outcome} with reward {float(_field(traj, 'reward')):g}.\n\n"
                f"{transcript(_messages(traj), self.max_transcript_chars)}\n\n{_INSTRUCTION}")
        return self.chat.prompt_ids([{"role": "system", "content": _SYSTEM}, {"role": "user", "content": body}])

    def __call__(self, trajs: Sequence[Any]) -> list[ExperienceRecord]:
        from agentrl_core.config import SamplingConfig

        chosen = [t for t in trajs if self._wanted(t)]
        if not chosen:
            return []
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=self.max_new_tokens)
        gens = self.engine.generate([self._prompt(t) for t in chosen], sampling, self.seed)
        out = []
        for traj, gen in zip(chosen, gens):
            parsed = parse_model_reply(self.chat.decode_reply(gen.token_ids))
            if parsed is None:
                self.malformed += 1
                continue
            out.append(ExperienceRecord(env=str(_field(traj, "env")), task_id=_field(traj, "task_id"),
                                        when_to_use=parsed[0][:MAX_WHEN_CHARS], content=parsed[1],
                                        score=float(_field(traj, "reward"))))
        if self.malformed:
            log.info("model summariser: %d malformed replies so far", self.malformed)
        return out
