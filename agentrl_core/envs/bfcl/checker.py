"""The official BFCL multi-turn checker's verdict, on our safe executor.

This is the verdict of the pinned `bfcl-eval` runner (`eval_runner._evaluate_single_multi_turn_entry`
→ `multi_turn_checker`), checked entry by entry against it in `tests/envs/test_bfcl_official.py`.
Per turn t (after the model's calls of turn t ran on the model's instances and the ground truth's
calls of turn t ran on separate ground-truth instances; both persist across turns):

- empty ground truth (a miss_func / miss_param turn, where the model should ask instead of act):
  nothing is judged; the model's calls still ran, so they count in later turns' state checks
  (the official runner imports `multi_turn_irrelevance_checker` but never calls it). The
  stricter rule "no call in such a turn" is `strict_irrelevance`, a training-reward option that
  is never reported as the BFCL score;
- otherwise it fails if the model made no call in it ("empty turn");
- **state check**: every public attribute of each ground-truth instance equals (==) the model's;
- **response check**: the turn's ground-truth results are an unordered sub-multiset of all the
  model's results so far (earlier turns included: a model may have fetched something already).

`check_trajectory` replays a whole trajectory as the official runner does: a step whose calls do
not all parse is dropped (the runner ignores steps it cannot decode), a trajectory with the wrong
number of turns fails as force-terminated, and it stops at the first failing turn. The env uses
`TurnJudge` to score each turn and carry on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from agentrl_core.envs.bfcl.calls import Call, CallError, parse_python_calls
from agentrl_core.envs.bfcl.data import Entry
from agentrl_core.envs.bfcl.executor import Executor


@dataclass(frozen=True)
class TurnVerdict:
    """Whether a turn passed; `error_type` and `message` say why not (official error types)."""

    passed: bool
    error_type: str = ""
    message: str = ""


PASS = TurnVerdict(True)


def state_differences(model: Executor, truth: Executor) -> dict[str, list[str]]:
    """Class -> public attributes whose values differ (`!=`); empty when the states match."""
    diffs: dict[str, list[str]] = {}
    for class_name, instance in truth.instances.items():
        theirs = vars(model.instances[class_name])
        bad = [
            key for key, value in vars(instance).items()
            if not key.startswith("_") and (key not in theirs or theirs[key] != value)
        ]
        if bad:
            diffs[class_name] = bad
    return diffs


def missing_results(model_results: Sequence[str], truth_results: Sequence[str]) -> list[str]:
    """Ground-truth results not matched one-to-one (any order) by the model's results."""
    available = Counter(model_results)
    missing = []
    for result in truth_results:
        if available[result] > 0:
            available[result] -= 1
        else:
            missing.append(result)
    return missing


IRRELEVANCE = TurnVerdict(False, "multi_turn:irrelevance_error", "the model called functions in a turn it should not")
"""The `strict_irrelevance` verdict (not the official one): a call in a turn whose ground truth is empty."""


def breaks_strict_irrelevance(entry: Entry, turn: int, model_calls_in_turn: int) -> bool:
    """The stricter, non-official rule: the model called a function in a turn whose ground truth is empty."""
    return model_calls_in_turn > 0 and not entry.ground_truth[turn]


def judge_turn(
    truth_calls: Sequence[Any],
    model_calls_in_turn: int,
    model: Executor,
    truth: Executor,
    model_results_so_far: Sequence[str],
    truth_results: Sequence[str],
) -> TurnVerdict:
    """The official verdict for one turn, given both parties' executed state (see module doc)."""
    if not truth_calls:
        return PASS
    if not model_calls_in_turn:
        return TurnVerdict(False, "multi_turn:empty_turn_model_response", "the model made no call in this turn")
    diffs = state_differences(model, truth)
    if diffs:
        return TurnVerdict(False, "multi_turn:instance_state_mismatch", f"state differs from the ground truth: {diffs}")
    missing = missing_results(model_results_so_far, truth_results)
    if missing:
        shown = [m[:200] for m in missing[:3]]
        return TurnVerdict(False, "multi_turn:execution_response_mismatch", f"missing ground-truth results {shown}")
    return PASS


def truth_calls(entry: Entry, turn: int) -> list[Call]:
    """The ground-truth calls of one turn, parsed (their arguments are all literals)."""
    return [call for text in entry.ground_truth[turn] for call in parse_python_calls(text)]


class TurnJudge:
    """Runs the ground truth turn by turn on its own instances and judges the model's turns."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.truth = Executor(entry)

    def close_turn(
        self, turn: int, model: Executor, model_calls_in_turn: int, model_results_so_far: Sequence[str]
    ) -> TurnVerdict:
        """Advance the ground truth by turn `turn` and judge the model's state and results."""
        calls = truth_calls(self.entry, turn)
        outcomes = self.truth.run_all(calls)
        truth_results = [o.result for o in outcomes]
        return judge_turn(calls, model_calls_in_turn, model, self.truth, model_results_so_far, truth_results)


@dataclass(frozen=True)
class TrajectoryVerdict:
    """A whole trajectory's verdict: `turn` is the first failing turn (None when valid)."""

    valid: bool
    turn: int | None = None
    error_type: str = ""
    message: str = ""


def check_trajectory(
    entry: Entry, model_turns: Sequence[Sequence[Sequence[Call | str]]], *, strict_irrelevance: bool = False
) -> TrajectoryVerdict:
    """Replay `model_turns[t][step]` (lists of calls, or call strings) and judge every turn.

    Call strings are parsed with `parse_python_calls`; a step with a string that does not parse,
    or with no call at all, is dropped, as the official runner drops steps it cannot decode.
    `strict_irrelevance` adds the stricter (non-official) irrelevance rule.
    """
    if len(model_turns) != len(entry.turns):
        return TrajectoryVerdict(False, None, "multi_turn:force_terminated", f"{len(model_turns)} turns for {len(entry.turns)}")
    model, judge = Executor(entry), TurnJudge(entry)
    results: list[str] = []
    for turn, steps in enumerate(model_turns):
        made = 0
        for calls in filter(None, map(_decoded, steps)):
            made += len(calls)
            results.extend(o.result for o in model.run_all(calls))
        verdict = judge.close_turn(turn, model, made, results)
        if verdict.passed and strict_irrelevance and breaks_strict_irrelevance(entry, turn, made):
            verdict = IRRELEVANCE
        if not verdict.passed:
            return TrajectoryVerdict(False, turn, verdict.error_type, verdict.message)
    return TrajectoryVerdict(True)


def _decoded(step: Sequence[Call | str]) -> list[Call]:
    """A step's calls; [] when any of its call strings does not parse (the step is dropped)."""
    calls: list[Call] = []
    for item in step:
        if isinstance(item, Call):
            calls.append(item)
            continue
        try:
            calls.extend(parse_python_calls(item))
        except CallError:
            return []
    return calls


def ground_truth_turns(entry: Entry) -> list[list[list[str]]]:
    """The ground truth as a trajectory: one step per non-empty turn, no step for empty turns."""
    return [[list(calls)] if calls else [] for calls in entry.ground_truth]
