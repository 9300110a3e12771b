"""Math word problems: generated stories, answer extraction, attempts and feedback, the expert."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from agentrl_core.envs import check_env, env_class, make
from agentrl_core.envs.math_word import (TEST_IDS, TRAIN_IDS, Difficulty, MathWord, Problem, extract_answer, facts,
                                         make_problem)
from agentrl_core.envs.partition import content_part
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

PROBLEM = Problem("Tavik has 12 moonpebbles. Tavik finds 5 more moonpebbles. How many?", 17, ("12 + 5 = 17",))
_STEP = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")


def test_registered_and_conforms() -> None:
    assert env_class("math") is MathWord
    check_env(make("math"), tasks_per_split=5)
    check_env(MathWord(max_attempts=1))


def test_splits_are_the_declared_ranges() -> None:
    env = MathWord()
    assert env.task_ids("train") == range(0, 5000) and env.task_ids("test") == range(5000, 5500)


def _check_step(step: str) -> int:
    """Recompute one worked step "a op b = c" (no eval) and return c."""
    match = _STEP.match(step)
    assert match, step
    a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
    expected = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    assert c == expected and (op != "/" or a % b == 0), step
    assert b <= 100, step
    return c


def test_problems_are_deterministic_and_well_formed() -> None:
    for task_id in list(range(300)) + list(range(5000, 5300)):
        p = make_problem(task_id)
        assert p == make_problem.__wrapped__(task_id)  # the same without the cache
        assert 1 <= len(p.steps) <= 3
        assert [_check_step(s) for s in p.steps][-1] == p.answer >= 0
        stated = [int(n) for n in re.findall(r"\d+", p.question)]
        assert stated and max(stated) <= 100
        assert p.question.endswith("have now?")


def test_problems_vary() -> None:
    problems = [make_problem(t) for t in range(200)]
    assert len({p.question for p in problems}) == 200
    ops = {s.split()[1] for p in problems for s in p.steps}
    assert ops == {"+", "-", "*", "/"}
    assert {len(p.steps) for p in problems} == {1, 2, 3}


@pytest.mark.parametrize("level", [Difficulty(), Difficulty(1, 1, 20, 100)], ids=["default", "one-step"])
def test_test_problems_share_no_fact_with_training_problems(level: Difficulty) -> None:
    """Held out in content: every fact of a test problem is a test fact, no fact of a training problem is."""
    test = [make_problem(t, level) for t in TEST_IDS[:300]]
    train = [make_problem(t, level) for t in TRAIN_IDS[:1500]]
    assert all(content_part(f) == "test" for p in test for f in facts(p))
    assert all(content_part(f) == "train" for p in train for f in facts(p))
    assert not {f for p in test for f in facts(p)} & {f for p in train for f in facts(p)}
    lengths = lambda problems: sorted({len(p.steps) for p in problems})  # noqa: E731
    assert lengths(test) == lengths(train)  # redrawing keeps every story length in the test split


@pytest.mark.parametrize("task_id", [-1, 5500, 10**9])
def test_unknown_task(task_id: int) -> None:
    with pytest.raises(TaskNotFoundError, match=r"\[0, 5000\)"):
        MathWord().reset(task_id=task_id)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("12 + 5 = 17 #### 17", 17),
        ("#### 3 first guess, no wait: #### 17", 17),  # the last marker wins
        ("#### 1,200.", 1200),
        ("So the total is ####1,200", 1200),
        ("#### $45", 45),
        ("#### 17.", 17),
        ("#### 17.0", 17),
        ("#### 12.5", Fraction(25, 2)),
        ("#### -5", -5),
        ("The answer is 17.", None),
        ("#### seventeen", None),
        ("", None),
    ],
)
def test_extract_answer(reply: str, expected: Fraction | int | None) -> None:
    assert extract_answer(reply) == expected


def _env_on(problem: Problem, **kwargs: int) -> MathWord:
    env = MathWord(**kwargs)
    env.reset(task_id=0)
    env._problem = problem  # a hand-made problem, so the expected text is known
    return env


def test_first_observation_is_short() -> None:
    obs, info = MathWord().reset(task_id=0)
    assert obs.startswith(make_problem(0).question)
    assert "#### <number>" in obs and len(obs.splitlines()) == 2 and len(obs.split()) < 80
    assert "answer" not in info


def test_correct_answer_ends_the_episode() -> None:
    env = _env_on(PROBLEM)
    result = env.step("12 + 5 = 17 #### 17.")
    assert (result.reward, result.terminated, result.truncated) == (1.0, True, False)
    assert result.info == {"success": True, "attempts": 1, "value": 17}
    with pytest.raises(ResetNeededError):
        env.step("#### 17")


def test_wrong_then_right_on_the_last_attempt() -> None:
    env = _env_on(PROBLEM)
    first = env.step("#### 16")
    assert first.observation == "Not quite. Try again."
    assert "17" not in first.observation  # the answer is not revealed
    assert (first.reward, first.terminated, first.truncated, first.info["success"]) == (0.0, False, False, False)
    assert first.info["value"] == 16
    assert env.step("#### 17").info["success"] is True


def test_attempts_run_out() -> None:
    env = _env_on(PROBLEM, max_attempts=3)
    assert env.step("#### 1").terminated is False
    missing = env.step("I think it is 17")
    assert missing.observation.startswith("No final answer found.") and "#### <number>" in missing.observation
    assert (missing.terminated, "value" not in missing.info) == (False, True)
    last = env.step("#### -17")
    assert last.observation == "Not quite. No attempts left."
    assert (last.reward, last.terminated, last.truncated, last.info["success"]) == (0.0, True, False, False)
    assert last.info["attempts"] == 3


def test_single_attempt() -> None:
    env = _env_on(PROBLEM, max_attempts=1)
    assert env.max_steps == 1
    last = env.step("no marker")
    assert (last.terminated, last.info["success"]) == (True, False)


def test_expert_solves_every_sampled_task() -> None:
    env = MathWord()
    for task_id in list(TRAIN_IDS[:200]) + list(TEST_IDS[:200]):
        env.reset(task_id=task_id)
        action = env.expert_action()
        assert "\n" not in action and action.endswith(f"#### {make_problem(task_id).answer}")
        result = env.step(action)
        assert result.reward == 1.0 and result.info["success"] is True


def test_bad_construction_and_expert_before_reset() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        MathWord(max_attempts=0)
    with pytest.raises(ResetNeededError):
        MathWord().expert_action()


def test_difficulty_knobs_bound_the_stories() -> None:
    env = MathWord(max_ops=1, max_stated=20, max_count=100)
    for task_id in range(0, 300, 3):
        obs, _ = env.reset(task_id=task_id)
        p = env.problem
        assert len(p.steps) == 1 and 0 <= p.answer <= 100
        assert all(int(n) <= 20 for n in re.findall(r"\d+", obs.split("\n")[0]))
        assert env.step(env.expert_action()).reward == 1.0
    assert MathWord().reset(task_id=7)[0].startswith(make_problem(7).question)  # defaults: the original stories
    with pytest.raises(ValueError, match="max_ops"):
        MathWord(min_ops=3, max_ops=2)
