"""EnvTuning's interaction protocol for BFCL: the reply format, per-step codes and the rewards.

A reply is `<think>...</think>` followed by exactly one of
`<tool_call>[{"name": ..., "arguments": {...}}, ...]</tool_call>` (run the calls) or
`<answer>...</answer>` (the request is done: the turn ends), with nothing else outside the tags.

Every reply adds one entry to the episode's log (EnvTuning's `user_turn_rewards`):

- `FORMAT_ERROR` (-3): the reply broke the format; the error goes back as the observation;
- `TOOL_OK` (-1): the tool calls ran, none failed;
- `TOOL_ERROR` (-2): at least one call failed (unknown/hidden function, bad arguments, exception);
- a turn score, 1.0 or 0.0, for the reply that ended the turn (an answer, an empty call list,
  or any reply once the turn's attempts are used up): 1.0 when the official state and response
  checks pass (see `checker`).

Rewards, given once at the end of the episode (`rounds` = len(log) = number of replies, `n_k` =
how many entries equal k):

- stages 1-2: `is_tool_call * ((rounds - n_-3) / rounds + n_-1 / (n_-1 + n_-2))`, where
  `is_tool_call = 1 if n_-1 + n_-2 > 0 else 0` (so the fraction is never 0/0); in [0, 2];
- stage 3: the mean of the turn scores (the 0/1 entries); in [0, 1].
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from agentrl_core.envs.bfcl.calls import Call, CallError, parse_json_calls

FORMAT_ERROR = -3.0
TOOL_ERROR = -2.0
TOOL_OK = -1.0
STAGE_REWARD_RANGE: dict[int, tuple[float, float]] = {1: (0.0, 2.0), 2: (0.0, 2.0), 3: (0.0, 1.0)}
REVEAL_MESSAGE = "I have updated some more functions you can choose from. What about now?"  # BFCL's own words

FORMAT_INSTRUCTIONS = (
    "Reply in exactly this format: first your reasoning inside <think></think>, then EITHER\n"
    '<tool_call>[{"name": "function_name", "arguments": {"parameter": value}}]</tool_call>\n'
    "to call one or more of the functions (a JSON list; the calls run in order and their results "
    "come back to you), OR\n<answer>a short reply to the user</answer>\n"
    "once the user's request is fulfilled (this ends the turn and the next request follows). "
    "Put nothing outside these tags. If a request cannot be done with the available functions or "
    "lacks a needed value, do not call anything: say so in <answer></answer>."
)

_THINK = re.compile(r"<think>([\s\S]*?)</think>")
_TOOL = re.compile(r"<tool_call>([\s\S]*?)</tool_call>")
_ANSWER = re.compile(r"<answer>([\s\S]*?)</answer>")


@dataclass(frozen=True)
class Reply:
    """A parsed reply: `kind` is "tool_call", "answer" or "format_error" (with `error`)."""

    kind: str
    calls: tuple[Call, ...] = ()
    answer: str = ""
    error: str = ""


def _format_error(message: str) -> Reply:
    return Reply("format_error", error=message)


def parse_reply(text: str) -> Reply:
    """Check a reply against the format (EnvTuning's rules, in their order) and extract its content."""
    thinks, tools, answers = _THINK.findall(text), _TOOL.findall(text), _ANSWER.findall(text)
    if not thinks:
        return _format_error("missing the <think></think> tags")
    if len(thinks) > 1:
        return _format_error("more than one <think></think> pair; only one is allowed")
    if len(tools) > 1:
        return _format_error("more than one <tool_call></tool_call> pair; put all calls in one JSON list")
    if len(answers) > 1:
        return _format_error("more than one <answer></answer> pair; only one is allowed")
    if tools and answers:
        return _format_error("a reply cannot contain both <tool_call> and <answer>")
    if not tools and not answers:
        return _format_error("the reply must contain either <tool_call></tool_call> or <answer></answer>")
    outside = (_TOOL if tools else _ANSWER).sub("", _THINK.sub("", text))
    if outside.strip():
        return _format_error(f"text outside the tags is not allowed: {outside.strip()[:60]!r}")
    if answers:
        return Reply("answer", answer=answers[0].strip())
    try:
        calls = parse_json_calls(tools[0].strip())
    except CallError as exc:
        return _format_error(f"the <tool_call> content must be a JSON list of calls: {exc}")
    return Reply("tool_call", calls=tuple(calls))


# -- rewards -------------------------------------------------------------------------------------
def turn_scores(log: Iterable[float]) -> list[float]:
    """The turn scores in a log: its 0/1 entries (the codes are negative)."""
    return [x for x in log if x in (0.0, 1.0)]


def format_tool_reward(log: Sequence[float]) -> float:
    """Stages 1-2: `is_tool_call * ((rounds - n_-3)/rounds + n_-1/(n_-1 + n_-2))`, in [0, 2].

    E.g. log [-3, -1, -2, -1, 1.0]: rounds 5, n_-3 1, n_-1 2, n_-2 1, so
    (5 - 1)/5 + 2/3 = 0.8 + 0.6667 = 1.4667. A log without tool calls scores 0.
    """
    rounds = len(log)
    ok, failed, bad_format = log.count(TOOL_OK), log.count(TOOL_ERROR), log.count(FORMAT_ERROR)
    if rounds == 0 or ok + failed == 0:
        return 0.0  # is_tool_call = 0
    return (rounds - bad_format) / rounds + ok / (ok + failed)


def progress_reward(log: Sequence[float]) -> float:
    """Stage 3: the mean of the turn scores (0.0 when no turn ended)."""
    scores = turn_scores(log)
    return sum(scores) / len(scores) if scores else 0.0


def episode_reward(stage: int, log: Sequence[float]) -> float:
    """The end-of-episode reward of curriculum `stage` (1, 2 or 3)."""
    if stage not in STAGE_REWARD_RANGE:
        raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
    return format_tool_reward(log) if stage in (1, 2) else progress_reward(log)


# -- observations --------------------------------------------------------------------------------
DOC_STYLES = ("full", "compact")
TOOL_DESCRIPTION = "Tool description: "  # BFCL's docs repeat their API's preamble before these words


def compact_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """A function doc without what a call never needs: the API preamble every function of a class repeats
    ("This tool belongs to ... Tool description: ") and the "response" schema. Name, description and
    parameters stay as they are: about half the tokens of BFCL's docs (e.g. 3,058 -> 1,639 for the file system).
    """
    description = str(doc.get("description", "")).split(TOOL_DESCRIPTION, 1)[-1]
    return {"name": doc["name"], "description": description, "parameters": doc.get("parameters", {})}


def docs_json(docs: Iterable[dict[str, Any]]) -> str:
    """Function docs as the model sees them: a JSON list, one doc per line."""
    return "[\n" + ",\n".join(json.dumps(d, ensure_ascii=False) for d in docs) + "\n]"


def first_observation(docs: Iterable[dict[str, Any]], question: str) -> str:
    """The episode's first observation: the functions, the format, the first user request."""
    return f"You can call these functions (JSON):\n{docs_json(docs)}\n\n{FORMAT_INSTRUCTIONS}\n\nUser: {question}"


def turn_observation(question: str, revealed: Sequence[dict[str, Any]] = ()) -> str:
    """The next user request; a miss_func reveal turn shows the new functions and BFCL's sentence."""
    if revealed:
        return f"New functions you can call (JSON):\n{docs_json(revealed)}\n\nUser: {REVEAL_MESSAGE}"
    return f"User: {question}"


def results_observation(results: Sequence[str]) -> str:
    """Tool results sent back after a tool_call reply."""
    return (
        f"Execution results: {json.dumps(list(results), ensure_ascii=False)}\n"
        "Call more functions if the request needs them; once it is fulfilled, reply with "
        "<think></think> and then <answer></answer>."
    )


def format_error_observation(error: str) -> str:
    """The message for a malformed reply."""
    return f"Format error: {error}.\n{FORMAT_INSTRUCTIONS}"
