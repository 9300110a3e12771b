"""The BFCL multi-turn Env: EnvTuning's protocol over the safe executor and the official checks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.bfcl import protocol
from agentrl_core.envs.bfcl.checker import TurnJudge, breaks_strict_irrelevance, truth_calls
from agentrl_core.envs.bfcl.data import Entry, entry_docs, visible_functions
from agentrl_core.envs.bfcl.executor import Executor
from agentrl_core.envs.bfcl.stages import STAGES, TEST_IDS, TRAIN_IDS, entry_of, stage_task_ids
from agentrl_core.envs.episode_metrics import EPISODE_METRICS
from agentrl_core.envs.registry import register
from agentrl_core.envs.reward_so_far import REWARD_SO_FAR
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

MAX_TURNS = 8  # the longest BFCL multi-turn entry (miss_func/miss_param) has 8 turns
DEFAULT_ATTEMPTS = 5  # EnvTuning's max_step_limit: replies per turn before it is forced to end


@dataclass
class _Episode:
    """The mutable state of one episode (fresh backend instances for both parties)."""

    entry: Entry
    model: Executor
    judge: TurnJudge
    turn: int = 0
    attempts: int = 0  # non-answer replies in the current turn
    calls_in_turn: int = 0
    steps: int = 0
    results: list[str] = field(default_factory=list)  # every model result so far
    log: list[float] = field(default_factory=list)  # one code or turn score per reply
    verdicts: list[str] = field(default_factory=list)  # "" for a turn the official check passed, else why not
    calls: int = 0  # calls the model made (in replies that kept the format)
    malformed: int = 0  # replies that broke the format, and calls naming a function the model was not shown

    def metrics(self) -> dict[str, float]:
        """{"well_formed": 1.0 when the episode so far made a call, every reply kept the format (so every
        call parsed) and every call named a function the model was shown; else 0.0,
        "progress": the share of the dialogue's turns scored 1 so far}.

            progress = (turns scored 1) / (turns of the entry)

        e.g. 2 of 4 turns passed -> 0.5. Turns not reached count 0, so a finished (or truncated) episode's
        progress is stage 3's reward, BFCL's progress score, at every stage: finer than the all-turns verdict.
        """
        passed = sum(protocol.turn_scores(self.log))
        return {"well_formed": float(self.calls > 0 and self.malformed == 0),
                "progress": passed / len(self.entry.turns)}

    def truncated_log(self) -> list[float]:
        """The log as a truncation now would leave it: the turns not yet ended score 0."""
        return self.log + [0.0] * (len(self.entry.turns) - self.turn)


@register
class Bfcl(Env):
    """BFCL v4 multi-turn function calling (base, miss_func, miss_param, long_context).

    Each episode is one entry: a dialogue of user requests over stateful backends (file system,
    trading, travel, ...). The model calls functions with `<tool_call>` and ends each turn with
    `<answer>`; at the end of a turn the official state and response checks score it 1/0. The
    reward comes once, at the end (0.0 on earlier steps): stages 1-2 reward format and working
    tool calls (in [0, 2]), stage 3 the mean turn score (in [0, 1]); see `protocol`. Every step's
    `info["reward_so_far"]` is the reward a truncation after it would give, so an episode the agent loop
    cuts off (its context full) keeps what it earned (`envs.reward_so_far`).
    `info["episode_metrics"]["well_formed"]` (on every step) is 1.0 while the episode has made a call and
    every reply kept the format and named only functions shown to the model, and `["progress"]` the share of
    the dialogue's turns passed so far (`_Episode.metrics`).
    `info["success"]` is the official BFCL verdict of the pinned `bfcl-eval` (every turn passed the
    official checks, see `checker`). `strict_irrelevance=True` makes the *reward* stricter: a turn
    whose ground truth is empty (the model should ask, not act) scores 0 if the model called a
    function in it; the official verdict in `info["success"]` ignores it. The reset `seed` is unused.
    """

    name = "bfcl"
    extra = "bfcl"
    requires = ("bfcl_eval", "mpmath")
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # stage 3; instances narrow them by stage
    reward_range = protocol.STAGE_REWARD_RANGE[3]
    action_format = (
        '<think>reasoning</think> then either <tool_call>[{"name": "fn", "arguments": {"param": value}}]</tool_call> '
        "or <answer>reply to the user</answer>; nothing outside the tags."
    )
    system_prompt = (
        "You are an expert in composing functions. You fulfil the user's requests by calling the functions "
        "you are given, turn by turn.\n" + protocol.FORMAT_INSTRUCTIONS
    )
    max_steps = MAX_TURNS * (DEFAULT_ATTEMPTS + 1)

    def __init__(
        self, stage: int = 3, categories: tuple[str, ...] | list[str] | None = None,
        max_attempts_per_turn: int = DEFAULT_ATTEMPTS, strict_irrelevance: bool = False, docs: str = "full",
    ) -> None:
        """`stage` picks the task set and the reward (1, 2 or 3); `categories` narrows the task set
        (e.g. ("base", "miss_func")); a turn ends after `max_attempts_per_turn` + 1 non-answer replies;
        `strict_irrelevance` zeroes the turn score (not the official verdict) of a call where none is due;
        `docs="compact"` shows the function docs without their repeated API preamble and response schema
        (`protocol.compact_doc`: half the prompt, for small models and CPUs; "full" is BFCL's own docs)."""
        super().__init__()
        if stage not in STAGES:
            raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
        if docs not in protocol.DOC_STYLES:
            raise ValueError(f"docs must be one of {protocol.DOC_STYLES}, got {docs!r}")
        if max_attempts_per_turn < 1:
            raise ValueError(f"max_attempts_per_turn must be >= 1, got {max_attempts_per_turn}")
        chosen = tuple(categories) if categories is not None else None
        self.stage = stage
        self.splits = {s: stage_task_ids(stage, s, chosen) for s in ("train", "test")}
        if not self.splits["train"] or not self.splits["test"]:
            raise ValueError(f"stage {stage} has no tasks in categories {chosen}")
        self._ids = {s: frozenset(ids) for s, ids in self.splits.items()}
        self.reward_range = protocol.STAGE_REWARD_RANGE[stage]
        self.max_attempts = max_attempts_per_turn
        self.strict_irrelevance = bool(strict_irrelevance)
        self.doc_style = docs
        self.max_steps = MAX_TURNS * (max_attempts_per_turn + 1)  # every turn ends by then
        self._episode: _Episode | None = None

    @property
    def episode(self) -> _Episode:
        if self._episode is None:
            raise ResetNeededError("bfcl: no episode yet; call reset() first")
        return self._episode

    # -- reset ---------------------------------------------------------------------------------
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = int(task_id)
        if task_id not in self._ids["train"] and task_id not in self._ids["test"]:
            raise TaskNotFoundError(
                f"bfcl stage {self.stage} has no task {task_id}; see task_ids('train') / task_ids('test') "
                f"(ids [{TRAIN_IDS.start}, {TRAIN_IDS.stop}) train, [{TEST_IDS.start}, {TEST_IDS.stop}) test)"
            )
        entry = entry_of(task_id)
        self._episode = _Episode(entry, Executor(entry), TurnJudge(entry))
        docs = self._docs(visible_functions(entry, 0))
        obs = protocol.first_observation(docs, _question(entry, 0))
        info = {"id": entry.id, "category": entry.category, "turns": len(entry.turns), "stage": self.stage}
        return obs, info

    def _docs(self, names: frozenset[str]) -> list[dict[str, Any]]:
        docs = [doc for name, (_, doc) in entry_docs(self.episode.entry).items() if name in names]
        return [protocol.compact_doc(d) for d in docs] if self.doc_style == "compact" else docs

    # -- step ----------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        """One reply; every step's info also carries the episode's well-formedness and progress so far
        (EPISODE_METRICS) and the reward a truncation now would give (REWARD_SO_FAR)."""
        result = self._reply(action)
        result.info[EPISODE_METRICS] = self.episode.metrics()
        ended = result.terminated or result.truncated
        result.info[REWARD_SO_FAR] = result.reward if ended else self._reward_if_truncated()
        return result

    def _reward_if_truncated(self) -> float:
        return protocol.episode_reward(self.stage, self.episode.truncated_log())

    def _reply(self, action: str) -> StepResult:
        ep = self.episode
        ep.steps += 1
        reply = protocol.parse_reply(action)
        if reply.kind == "format_error":
            ep.malformed += 1
        else:
            shown = visible_functions(ep.entry, ep.turn)
            ep.calls += len(reply.calls)
            ep.malformed += sum(call.name not in shown for call in reply.calls)
        if reply.kind == "answer" or (reply.kind == "tool_call" and not reply.calls):
            return self._end_turn("")
        ep.attempts += 1
        if reply.kind == "format_error":
            code, obs = protocol.FORMAT_ERROR, protocol.format_error_observation(reply.error)
        else:
            outcomes = ep.model.run_all(reply.calls)
            ep.calls_in_turn += len(outcomes)
            ep.results.extend(o.result for o in outcomes)
            code = protocol.TOOL_OK if all(o.ok for o in outcomes) else protocol.TOOL_ERROR
            obs = protocol.results_observation([o.result for o in outcomes])
        if ep.attempts > self.max_attempts:  # EnvTuning: this reply's score is the turn's, not a code
            return self._end_turn(f"(This turn ended after {ep.attempts} replies without an answer.)\n")
        ep.log.append(code)
        if ep.steps >= self.max_steps:
            return self._truncate(obs)
        return StepResult(obs, 0.0, False, False, {"code": code, "turn": ep.turn, "attempts": ep.attempts})

    def _end_turn(self, note: str) -> StepResult:
        """Judge the current turn, log its score, and move to the next turn (or end the episode)."""
        ep = self.episode
        verdict = ep.judge.close_turn(ep.turn, ep.model, ep.calls_in_turn, ep.results)
        irrelevant = self.strict_irrelevance and breaks_strict_irrelevance(ep.entry, ep.turn, ep.calls_in_turn)
        score = 1.0 if verdict.passed and not irrelevant else 0.0
        ep.log.append(score)
        ep.verdicts.append("" if verdict.passed else verdict.error_type)
        info: dict[str, Any] = {"code": score, "turn": ep.turn, "turn_passed": verdict.passed}
        if irrelevant:
            info["irrelevance"] = True
        ep.turn, ep.attempts, ep.calls_in_turn = ep.turn + 1, 0, 0
        if ep.turn == len(ep.entry.turns):
            return self._finish("The conversation is over.", info, truncated=False)
        if ep.steps >= self.max_steps:
            return self._truncate(note + "The step limit was reached.")
        revealed = ep.entry.missed.get(ep.turn, ())
        obs = protocol.turn_observation(_question(ep.entry, ep.turn), self._docs(frozenset(revealed)))
        return StepResult(note + obs, 0.0, False, False, info)

    def _truncate(self, obs: str) -> StepResult:
        ep = self.episode
        ep.log = ep.truncated_log()  # unfinished turns score 0
        return self._finish(obs, {"turn": ep.turn}, truncated=True)

    def _finish(self, obs: str, info: dict[str, Any], *, truncated: bool) -> StepResult:
        ep = self.episode
        scores = protocol.turn_scores(ep.log)
        passed = len(ep.verdicts) == len(ep.entry.turns) and not any(ep.verdicts)  # the official verdict
        success = not truncated and passed
        reward = protocol.episode_reward(self.stage, ep.log)
        info = {**info, "success": success, "turn_scores": scores, "log": list(ep.log), "turn_errors": ep.verdicts}
        return StepResult(obs, reward, not truncated, truncated, info)

    # -- expert --------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The ground truth: the turn's calls as one <tool_call>, then an <answer> (an answer alone
        on a turn whose ground truth is empty)."""
        ep = self.episode
        calls = truth_calls(ep.entry, ep.turn)
        if calls and ep.calls_in_turn == 0:
            payload = [c.as_json(ep.model.positional_order(c.name)) for c in calls]
            return f"<think>I will call the functions that fulfil this request.</think><tool_call>{json.dumps(payload)}</tool_call>"
        return "<think>The request is handled.</think><answer>Done.</answer>"


def _question(entry: Entry, turn: int) -> str:
    """The user text of a turn (BFCL's reveal sentence for a turn without user messages)."""
    return "\n".join(entry.turns[turn]) or protocol.REVEAL_MESSAGE
