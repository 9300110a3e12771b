"""Math word problems: GSM8K-style arithmetic stories answered with a final `#### <number>`.

Task id -> a deterministic story (seeded by the id) about an invented person and invented objects,
with 1 to 3 operations (+, -, *, exact /). Every number stated in the story is <= 100, every
intermediate count is a positive integer <= 1000, and the answer is a non-negative integer. The
constructor's difficulty knobs (`min_ops`, `max_ops`, `max_stated`, `max_count`) change those
bounds, e.g. `env.kwargs: {max_ops: 1, max_stated: 20, max_count: 100}` for one-step problems.
The model replies with free text; the LAST `#### n` counts ("#### 1,200." reads as 1200). Every
reply is one attempt: correct -> reward 1.0 and the episode ends; a wrong number -> "Not quite.
Try again." (the answer is never revealed) until `max_attempts` are used, then reward 0.0.

Held out in content: the test split shares no arithmetic fact with the training split. Each fact
("a op b", operands sorted for + and *, so 10 + 19 and 19 + 10 are one fact) falls in one part of the
fact space (`envs.partition.content_part`); a test id redraws its story until every step's fact is a
test fact, a train id until none is. The number of operations is drawn first and kept, so the
redrawing does not make test stories shorter than training ones.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.partition import content_part
from agentrl_core.envs.registry import register
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

TRAIN_IDS = range(0, 5000)
TEST_IDS = range(5000, 5500)
MAX_STATED = 100  # largest number written in a story
MAX_COUNT = 1000  # largest intermediate count, so multiplications stay readable
MAX_DRAWS = 20_000  # stories drawn for one id before giving up (a 3-step test story needs ~8**3 on average)
FORMAT_HINT = "End your reply with '#### <number>', e.g. '#### 42'."
# `####`, optional sign and $, digits with optional thousands commas, optional decimals; a trailing
# period ("#### 17.") is left out of the match because a decimal point needs digits after it.
_MARKER = re.compile(r"####\s*\$?\s*([-+]?\d[\d,]*(?:\.\d+)?)")

_NAMES = (
    "Zorvan", "Mirelle", "Tavik", "Quenna", "Brolin", "Ysolde", "Fennic", "Oralie", "Drumo", "Kessa",
    "Pellan", "Vantra", "Ilomir", "Saffi", "Grundel", "Nuala", "Tiberon", "Wenlo", "Azrith", "Lumae",
)
_OBJECTS = (
    "glimberries", "zorp coins", "moonpebbles", "fizzlecaps", "sky marbles", "dreamquills",
    "puffleseeds", "starbuttons", "snorkel shells", "bramblenuts", "glowtiles", "wobblestones",
)
_CONTAINERS = ("crates", "baskets", "jars", "pouches", "boxes", "sacks")


@dataclass(frozen=True)
class Problem:
    """One story: the question text, its integer answer and the worked steps ("3 * 4 = 12")."""

    question: str
    answer: int
    steps: tuple[str, ...]


# -- problem generation -------------------------------------------------------------------------
@dataclass(frozen=True)
class Difficulty:
    """Knobs of the generator: how many operations a story has, and how large its numbers get.

    Other settings give other stories for the same ids, still deterministic (the defaults keep the
    original seeds; the stories changed once, when the fact space was split between train and test).
    """

    min_ops: int = 1
    max_ops: int = 3
    max_stated: int = MAX_STATED
    """Largest number written in a story."""
    max_count: int = MAX_COUNT
    """Largest intermediate count."""

    def validate(self) -> None:
        if not 1 <= self.min_ops <= self.max_ops <= 6:
            raise ValueError(f"need 1 <= min_ops <= max_ops <= 6, got min_ops={self.min_ops}, max_ops={self.max_ops}")
        if not 10 <= self.max_stated <= self.max_count <= 100_000:
            raise ValueError(f"need 10 <= max_stated <= max_count <= 100000, got max_stated={self.max_stated}, "
                             f"max_count={self.max_count}")

    @property
    def seed_tag(self) -> str:
        """What the per-task RNG is seeded with besides the id ('' for the defaults: the original stories)."""
        return "" if self == Difficulty() else f":{self.min_ops}-{self.max_ops}:{self.max_stated}:{self.max_count}"


@dataclass
class _Story:
    """A story being built: who, what, the running count, the sentences and the worked steps."""

    name: str
    friend: str
    obj: str
    count: int
    sentences: list[str]
    steps: list[str]
    level: Difficulty = Difficulty()

    def apply(self, op: str, operand: int, sentence: str) -> None:
        """Record one operation: count <- count op operand, with its sentence and worked step."""
        value = {"+": self.count + operand, "-": self.count - operand,
                 "*": self.count * operand, "/": self.count // operand}[op]
        self.steps.append(f"{self.count} {op} {operand} = {value}")
        self.sentences.append(sentence)
        self.count = value


def _open(rng: random.Random, story: _Story, ops_left: int) -> int:
    """The first sentence; sometimes it is itself a multiplication (k containers of n each).
    Returns how many operations it used (0 or 1)."""
    if ops_left >= 1 and rng.random() < 0.3:
        k, n = rng.randint(2, 10), rng.randint(2, min(20, story.level.max_count // 10))
        container = rng.choice(_CONTAINERS)
        story.count = k
        story.apply("*", n, f"{story.name} has {k} {container} with {n} {story.obj} in each.")
        return 1
    story.count = rng.randint(2, story.level.max_stated)
    story.sentences.append(f"{story.name} has {story.count} {story.obj}.")
    return 0


def _valid_ops(count: int, level: Difficulty = Difficulty()) -> list[str]:
    """The operations that keep the count a positive integer <= max_count with stated numbers <= max_stated."""
    ops = ["+"] if count < level.max_count else []
    if count >= 2:
        ops.append("-")
    if count * 2 <= level.max_count:
        ops.append("*")
    if any(count % k == 0 for k in range(2, 11)):
        ops.append("/")
    return ops


def _next_op(rng: random.Random, story: _Story) -> None:
    """Add one random valid operation to the story."""
    s, c, level = story, story.count, story.level
    op = rng.choice(_valid_ops(c, level))
    if op == "+":
        n = rng.randint(1, min(level.max_stated, level.max_count - c))
        s.apply("+", n, rng.choice((f"{s.friend} gives {s.name} {n} more {s.obj}.",
                                    f"{s.name} finds {n} more {s.obj}.")))
    elif op == "-":
        n = rng.randint(1, min(level.max_stated, c - 1))
        s.apply("-", n, rng.choice((f"{s.name} gives {n} {s.obj} to {s.friend}.",
                                    f"{s.name} loses {n} {s.obj}.")))
    elif op == "*":
        k = rng.randint(2, min(10, level.max_count // c))
        s.apply("*", k, f"Then {s.name}'s pile of {s.obj} grows to {k} times its size.")
    else:
        k = rng.choice([d for d in range(2, 11) if c % d == 0])
        s.apply("/", k, f"{s.name} splits the {s.obj} into {k} equal piles and keeps one pile.")


def fact_key(step: str) -> tuple[str, int, int]:
    """The arithmetic fact of a worked step "a op b = c": (op, a, b), with a <= b for + and * (commutative)."""
    a, op, b = step.split(" = ")[0].split(" ")
    x, y = int(a), int(b)
    return (op, min(x, y), max(x, y)) if op in "+*" else (op, x, y)


def facts(problem: Problem) -> tuple[tuple[str, int, int], ...]:
    """The facts of a problem's worked steps, in order: its arithmetic content (what a test must not share)."""
    return tuple(fact_key(step) for step in problem.steps)


def _draw_story(rng: random.Random, level: Difficulty, ops: int) -> Problem:
    """One random story with `ops` operations at difficulty `level`."""
    name, friend = rng.sample(_NAMES, 2)
    story = _Story(name, friend, rng.choice(_OBJECTS), 0, [], [], level)
    left = ops - _open(rng, story, ops)
    for _ in range(left):
        _next_op(rng, story)
    question = " ".join(story.sentences) + f" How many {story.obj} does {name} have now?"
    return Problem(question, story.count, tuple(story.steps))


@lru_cache(maxsize=8192)
def make_problem(task_id: int, level: Difficulty = Difficulty()) -> Problem:
    """The problem of `task_id` at difficulty `level` (a seeded RNG per id, so the same id always gives
    the same story); a test id's facts are all test facts, a train id's none (module docstring)."""
    if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
        raise TaskNotFoundError(
            f"math has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
            f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
        )
    rng = random.Random(f"math-word-v1:{task_id}{level.seed_tag}")
    want = "test" if task_id in TEST_IDS else "train"
    ops = rng.randint(level.min_ops, level.max_ops)
    for _ in range(MAX_DRAWS):
        problem = _draw_story(rng, level, ops)
        if all(content_part(fact) == want for fact in facts(problem)):
            return problem
    raise RuntimeError(f"math: no {ops}-step story of the {want} facts for task {task_id} in {MAX_DRAWS} draws "
                       f"at {level}")


# -- reading a reply ------------------------------------------------------------------------------
def extract_answer(reply: str) -> Fraction | None:
    """The number after the LAST `####` in `reply` (commas dropped), or None when there is none."""
    found = _MARKER.findall(reply)
    if not found:
        return None
    return Fraction(found[-1].replace(",", ""))


def _json_number(value: Fraction) -> int | float:
    """A JSON-friendly number for info dicts."""
    return value.numerator if value.denominator == 1 else float(value)


@register
class MathWord(Env):
    """Solve one word problem in at most `max_attempts` replies (every reply is one attempt).

    A task id fixes the problem (the reset `seed` is unused).
    """

    name = "math"
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 5000), test [5000, 5500)
    action_format = "Free text (your reasoning) ending with '#### <integer>', e.g. '... 12 + 5 = 17 #### 17'."
    system_prompt = "Solve the math word problem step by step, then end your reply with '#### <number>'."
    max_steps = 2  # the default max_attempts; instances take theirs from the constructor

    def __init__(self, max_attempts: int = 2, min_ops: int = 1, max_ops: int = 3, max_stated: int = MAX_STATED,
                 max_count: int = MAX_COUNT) -> None:
        super().__init__()
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.difficulty = Difficulty(min_ops, max_ops, max_stated, max_count)
        self.difficulty.validate()
        self.max_attempts = max_attempts
        self.max_steps = max_attempts  # every reply is one attempt, so the episode ends in time
        self._problem: Problem | None = None
        self._attempts = 0

    @property
    def problem(self) -> Problem:
        """The current problem (after reset)."""
        if self._problem is None:
            raise ResetNeededError("math: no problem yet; call reset() first")
        return self._problem

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._problem = make_problem(int(task_id), self.difficulty)
        self._attempts = 0
        obs = f"{self._problem.question}\n{FORMAT_HINT} You have {self.max_attempts} attempts."
        return obs, {"attempts": 0}

    def _step(self, action: str) -> StepResult:
        self._attempts += 1
        value = extract_answer(action)
        info: dict[str, Any] = {"success": False, "attempts": self._attempts}
        if value is not None:
            info["value"] = _json_number(value)
        if value == self.problem.answer:
            info["success"] = True
            return StepResult(f"Correct! The answer is {self.problem.answer}.", 1.0, True, False, info)
        message = f"No final answer found. {FORMAT_HINT}" if value is None else "Not quite."
        if self._attempts < self.max_attempts:
            return StepResult(f"{message} Try again.", 0.0, False, False, info)
        return StepResult(f"{message} No attempts left.", 0.0, True, False, info)

    def expert_action(self) -> str:
        """A one-line worked solution ending with the right marker: "3 * 4 = 12, 12 + 5 = 17 #### 17"."""
        p = self.problem
        return f"{', '.join(p.steps)} #### {p.answer}"
