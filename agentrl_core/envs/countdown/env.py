"""Countdown: combine the given numbers with + - * / to reach a target (multi-turn, with feedback).

Task id -> a deterministic, solvable problem: `num_numbers` numbers (mostly 1..20, a few up to 50)
and a target in [1, 200] built by combining all of them once each, every intermediate result a
non-negative integer. The model answers with `<answer>EXPR</answer>` (the last tag counts) and has
`max_attempts` tries. Reward (TinyZero's): 1.0 when solved; on the last, failed attempt 0.1 if any
answer used exactly the given numbers (format credit), else 0.0; 0.0 on intermediate steps.
"""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import combinations
from typing import Any

from agentrl_core.envs.arith import ArithDivisionByZero, ArithError, format_fraction, parse_expression
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

TRAIN_IDS = range(0, 5000)
TEST_IDS = range(5000, 5500)
MAX_TARGET = 200
FORMAT_REWARD = 0.1
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TEST_BUCKETS = 8  # one problem in 8 (by hash) is reserved for the test split


@dataclass(frozen=True)
class Problem:
    """One puzzle: the numbers to use (each once) and the target value."""

    numbers: tuple[int, ...]
    target: int

    @property
    def key(self) -> tuple[tuple[int, ...], int]:
        """Identity of the puzzle regardless of number order."""
        return tuple(sorted(self.numbers)), self.target


# -- problem generation -------------------------------------------------------------------------
def _is_test_problem(problem: Problem) -> bool:
    """Hash bucket of the puzzle; test problems and train problems come from disjoint buckets,
    so no test puzzle ever equals a train puzzle (whatever the ids)."""
    return zlib.crc32(repr(problem.key).encode()) % _TEST_BUCKETS == 0


def _random_target(rng: random.Random, numbers: list[int]) -> int:
    """Combine all numbers, each once, in a random order with random valid ops."""
    values = list(numbers)
    while len(values) > 1:
        i, j = rng.sample(range(len(values)), 2)
        a, b = values[i], values[j]
        options = [a + b, a * b]
        if a >= b:
            options.append(a - b)  # keeps every intermediate non-negative
        if b != 0 and a % b == 0:
            options.append(a // b)  # keeps every intermediate an integer
        result = rng.choice(options)
        values = [v for k, v in enumerate(values) if k not in (i, j)] + [result]
    return values[0]


@lru_cache(maxsize=4096)
def make_problem(task_id: int, num_numbers: int = 3) -> Problem:
    """The problem of `task_id` (seeded by the id; rejection-sampled into the id's split)."""
    if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
        raise TaskNotFoundError(
            f"countdown has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
            f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
        )
    want_test = task_id in TEST_IDS
    rng = random.Random(f"countdown-v1:{num_numbers}:{task_id}")
    while True:
        numbers = [rng.randint(21, 50) if rng.random() < 0.05 else rng.randint(1, 20) for _ in range(num_numbers)]
        target = _random_target(rng, numbers)
        if not 1 <= target <= MAX_TARGET:
            continue
        problem = Problem(tuple(numbers), target)
        if _is_test_problem(problem) == want_test:
            return problem


# -- exhaustive solver (the expert) -------------------------------------------------------------
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _join(a: tuple[Fraction, str, int], op: str, b: tuple[Fraction, str, int]) -> tuple[Fraction, str, int]:
    """Combine two (value, text, precedence) terms, adding only the parentheses needed."""
    p = _PREC[op]
    left = a[1] if a[2] >= p else f"({a[1]})"
    # a - (b + c) and a / (b * c) need parentheses on the right even at equal precedence
    right = b[1] if b[2] > p or (b[2] == p and op in "+*") else f"({b[1]})"
    if op == "+":
        value = a[0] + b[0]
    elif op == "-":
        value = a[0] - b[0]
    elif op == "*":
        value = a[0] * b[0]
    else:
        value = a[0] / b[0]
    return value, f"{left} {op} {right}", p


def _search(terms: list[tuple[Fraction, str, int]], target: Fraction) -> str | None:
    """Depth-first search over every pair and operator; the first expression that hits the target."""
    if len(terms) == 1:
        return terms[0][1] if terms[0][0] == target else None
    for i, j in combinations(range(len(terms)), 2):
        rest = [t for k, t in enumerate(terms) if k not in (i, j)]
        a, b = terms[i], terms[j]
        for x, op, y in ((a, "+", b), (a, "*", b), (a, "-", b), (b, "-", a), (a, "/", b), (b, "/", a)):
            if op == "/" and y[0] == 0:
                continue
            found = _search([_join(x, op, y)] + rest, target)
            if found is not None:
                return found
    return None


@lru_cache(maxsize=4096)
def solve(numbers: tuple[int, ...], target: int) -> str | None:
    """An expression using each number once that equals `target`, or None (exhaustive search)."""
    ordered = sorted(numbers, reverse=True)  # larger first reads more naturally: 25 - 3
    return _search([(Fraction(n), str(n), 3) for n in ordered], Fraction(target))


# -- judging one reply ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """How one reply fared: feedback text, whether it solved the puzzle, whether it was well formed."""

    message: str
    solved: bool = False
    well_formed: bool = False
    value: Fraction | None = None


def judge(reply: str, problem: Problem) -> Verdict:
    """Check the last <answer> of `reply` against `problem`."""
    answers = _ANSWER.findall(reply)
    if not answers:
        return Verdict("No answer found. Reply with <answer>EXPRESSION</answer>.")
    try:
        expr = parse_expression(answers[-1])
    except ArithError as exc:
        return Verdict(f"Invalid expression: {exc}")
    given = sorted(problem.numbers)
    if Counter(expr.numbers) != Counter(given):
        return Verdict(f"You used {sorted(expr.numbers)} but must use each of {given} exactly once.")
    try:
        value = expr.value()
    except ArithDivisionByZero:
        return Verdict("Your expression divides by zero.", well_formed=True)
    if value == problem.target:
        return Verdict(f"Correct! {expr.text} = {problem.target}.", solved=True, well_formed=True, value=value)
    message = f"Your expression equals {format_fraction(value)}, not {problem.target}."
    return Verdict(message, well_formed=True, value=value)


def _json_number(value: Fraction) -> int | float:
    """A JSON-friendly number for info dicts."""
    return value.numerator if value.denominator == 1 else float(value)


@register
class Countdown(Env):
    """Reach the target with the given numbers, each used once, in at most `max_attempts` answers.

    Every reply is one attempt (so `max_steps == max_attempts`); a task id fixes the problem
    (the reset `seed` is unused).
    """

    name = "countdown"
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 5000), test [5000, 5500)
    action_format = "Free text ending with <answer>EXPRESSION</answer>, e.g. <answer>(25 - 3) * 2</answer>."
    system_prompt = (
        "You solve arithmetic puzzles. Think briefly, then give your expression inside <answer></answer> tags."
    )
    max_steps = 3  # the default max_attempts; instances take theirs from the constructor

    def __init__(self, num_numbers: int = 3, max_attempts: int = 3) -> None:
        super().__init__()
        if not 2 <= num_numbers <= 6:
            raise ValueError(f"num_numbers must be in [2, 6], got {num_numbers}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.num_numbers = num_numbers
        self.max_attempts = max_attempts
        self.max_steps = max_attempts  # every reply is one attempt, so the episode ends in time
        self._problem: Problem | None = None
        self._attempts = 0
        self._well_formed = False

    @property
    def problem(self) -> Problem:
        """The current puzzle (after reset)."""
        if self._problem is None:
            raise ResetNeededError("countdown: no problem yet; call reset() first")
        return self._problem

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._problem = make_problem(int(task_id), self.num_numbers)
        self._attempts = 0
        self._well_formed = False
        numbers = sorted(self._problem.numbers)
        obs = (
            f"Numbers: {numbers}. Target: {self._problem.target}.\n"
            "Use each number exactly once with + - * / and parentheses.\n"
            f"Answer as <answer>expression</answer>. You have {self.max_attempts} attempts."
        )
        return obs, {"numbers": numbers, "target": self._problem.target, "attempts": 0}

    def _step(self, action: str) -> StepResult:
        self._attempts += 1
        verdict = judge(action, self.problem)
        self._well_formed = self._well_formed or verdict.well_formed
        info: dict[str, Any] = {"success": verdict.solved, "attempts": self._attempts}
        if verdict.value is not None:
            info["value"] = _json_number(verdict.value)
        if verdict.solved:
            return StepResult(verdict.message, 1.0, True, False, info)
        left = self.max_attempts - self._attempts
        if left > 0:
            return StepResult(f"{verdict.message} Try again ({left} left).", 0.0, False, False, info)
        reward = FORMAT_REWARD if self._well_formed else 0.0
        return StepResult(f"{verdict.message} No attempts left.", reward, True, False, info)

    def expert_action(self) -> str:
        """A correct expression in answer tags (exhaustive search over the current problem)."""
        solution = solve(self.problem.numbers, self.problem.target)
        if solution is None:  # cannot happen for generated problems: they are built from a solution
            raise RuntimeError(f"countdown: no solution for {self.problem}")
        return f"<answer>{solution}</answer>"
