"""Countdown: generated problems, judging and feedback, attempts and rewards, the expert."""

from __future__ import annotations

import pytest

from agentrl_core.envs.arith import evaluate
from agentrl_core.envs.countdown import TEST_IDS, TRAIN_IDS, Countdown, Problem, judge, make_problem, solve
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

PROBLEM = Problem((3, 5, 7), 22)  # 3 * 5 + 7


def test_problem_is_deterministic_and_well_formed() -> None:
    for task_id in list(range(300)) + list(range(5000, 5300)):
        p = make_problem(task_id)
        assert p == make_problem.__wrapped__(task_id)  # the same without the cache
        assert len(p.numbers) == 3
        assert all(1 <= n <= 50 for n in p.numbers)
        assert 1 <= p.target <= 200
        solution = solve(p.numbers, p.target)
        assert solution is not None and evaluate(solution) == p.target


def test_most_numbers_are_small() -> None:
    numbers = [n for t in range(1000) for n in make_problem(t).numbers]
    assert sum(n <= 20 for n in numbers) / len(numbers) > 0.9
    assert max(numbers) > 20  # a few larger ones exist


def test_splits_hold_different_problems() -> None:
    train = {make_problem(t).key for t in TRAIN_IDS[:500]}
    test = {make_problem(t).key for t in TEST_IDS[:500]}
    assert not train & test


def test_other_sizes() -> None:
    p = make_problem(7, 4)
    assert len(p.numbers) == 4
    env = Countdown(num_numbers=4)
    env.reset(task_id=7)
    assert env.step(env.expert_action()).reward == 1.0


@pytest.mark.parametrize("task_id", [-1, 5500, 10**9])
def test_unknown_task(task_id: int) -> None:
    with pytest.raises(TaskNotFoundError, match=r"\[0, 5000\)"):
        Countdown().reset(task_id=task_id)


def test_solver_formats_with_needed_parentheses_only() -> None:
    assert solve((25, 3, 2), 44) == "(25 - 3) * 2"
    only_with_parentheses = solve((7, 3, 2), 7)  # 7 * (3 - 2) or 7 / (3 - 2)
    assert only_with_parentheses is not None and "(3 - 2)" in only_with_parentheses
    assert evaluate(solve((2, 3, 4), 10) or "") == 10
    assert solve((1, 1, 1), 100) is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("I think 3*5+7", "No answer found. Reply with <answer>EXPRESSION</answer>."),
        ("<answer>3 ** 5 + 7</answer>", "Invalid expression: Only + - * / are allowed, not '**'."),
        ("<answer>3 * 5 +</answer>", "Invalid expression: It is not a valid expression."),
        ("<answer>3 * 3 + 7</answer>", "You used [3, 3, 7] but must use each of [3, 5, 7] exactly once."),
        ("<answer>3 + 3</answer>", "You used [3, 3] but must use each of [3, 5, 7] exactly once."),
        ("<answer>7 / (5 - 5 + 0)</answer>", "You used [0, 5, 5, 7] but must use each of [3, 5, 7] exactly once."),
        ("<answer>3 / (5 - 5)</answer>", "You used [3, 5, 5] but must use each of [3, 5, 7] exactly once."),
        ("<answer>5 + 7 - 3</answer>", "Your expression equals 9, not 22."),
        ("<answer>7 / (5 * 3)</answer>", "Your expression equals 7/15, not 22."),
    ],
)
def test_feedback(reply: str, expected: str) -> None:
    assert judge(reply, PROBLEM).message == expected


def test_division_by_zero_feedback() -> None:
    verdict = judge("<answer>4 / (2 - 2)</answer>", Problem((2, 2, 4), 8))
    assert verdict.message == "Your expression divides by zero."
    assert verdict.well_formed and not verdict.solved


def test_last_answer_tag_counts() -> None:
    reply = "<answer>1 + 1</answer> hmm, no: <ANSWER> 3 * 5 + 7 </ANSWER>"
    verdict = judge(reply, PROBLEM)
    assert verdict.solved and verdict.message == "Correct! 3 * 5 + 7 = 22."
    assert not judge("<answer>3 * 5 + 7</answer> then <answer>7</answer>", PROBLEM).solved


def _env_on(problem: Problem, **kwargs: int) -> Countdown:
    env = Countdown(**kwargs)
    env.reset(task_id=0)
    env._problem = problem  # a hand-made problem, so the expected text is known
    return env


def test_first_observation_is_short_and_complete() -> None:
    env = Countdown()
    obs, info = env.reset(task_id=0)
    p = make_problem(0)
    assert f"Numbers: {sorted(p.numbers)}. Target: {p.target}." in obs
    assert "<answer>" in obs and len(obs.splitlines()) == 3 and len(obs.split()) < 40
    assert info["target"] == p.target


def test_solving_ends_the_episode() -> None:
    env = _env_on(PROBLEM)
    result = env.step("<answer>3 * 5 + 7</answer>")
    assert (result.reward, result.terminated, result.truncated) == (1.0, True, False)
    assert result.info == {"success": True, "attempts": 1, "value": 22}
    with pytest.raises(ResetNeededError):
        env.step("<answer>3 * 5 + 7</answer>")


def test_wrong_answers_then_format_credit() -> None:
    env = _env_on(PROBLEM)
    first = env.step("<answer>5 + 7 - 3</answer>")
    assert first.observation == "Your expression equals 9, not 22. Try again (2 left)."
    assert (first.reward, first.terminated, first.info["value"]) == (0.0, False, 9)
    assert env.step("no idea").reward == 0.0
    last = env.step("<answer>1 + 2</answer>")
    assert last.observation.endswith("No attempts left.")
    # lost, but one answer used exactly the given numbers: TinyZero's 0.1
    assert (last.reward, last.terminated, last.truncated, last.info["success"]) == (0.1, True, False, False)
    assert last.info["attempts"] == 3


def test_no_well_formed_answer_gets_nothing() -> None:
    env = _env_on(PROBLEM, max_attempts=2)
    assert env.step("<answer>3 + 3</answer>").reward == 0.0
    last = env.step("<answer>x</answer>")
    assert (last.reward, last.terminated) == (0.0, True)


def test_expert_solves_every_sampled_task() -> None:
    env = Countdown()
    for task_id in list(TRAIN_IDS[:50]) + list(TEST_IDS[:50]):
        env.reset(task_id=task_id)
        action = env.expert_action()
        assert action.startswith("<answer>") and action.endswith("</answer>")
        result = env.step(action)
        assert result.reward == 1.0 and result.info["success"] is True


def test_expert_before_reset() -> None:
    with pytest.raises(ResetNeededError):
        Countdown().expert_action()
