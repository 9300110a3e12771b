"""Safe arithmetic: exact values, and every forbidden construct rejected without evaluating it."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from agentrl_core.envs.arith import (
    MAX_CHARS,
    ArithDivisionByZero,
    ArithError,
    evaluate,
    format_fraction,
    parse_expression,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("(25 - 3) * 2", 44),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("10 - (4 - 3)", 9),
        ("7 / 2", Fraction(7, 2)),
        ("1 / 3 + 1 / 3 + 1 / 3", 1),  # exact: no 0.9999
        ("8 / 4 / 2", 1),
        ("((((5))))", 5),
        ("  6 *\t7  ", 42),
        ("3 × 4 ÷ 2 − 1", 5),  # unicode operators read as * / -
        ("3 - 5", -2),  # negative results are fine; only literals must be non-negative
        ("0", 0),
    ],
)
def test_evaluates_exactly(text: str, value: Fraction) -> None:
    assert evaluate(text) == value


def test_numbers_in_reading_order() -> None:
    assert parse_expression("(25 - 3) * 2 + 3").numbers == (25, 3, 2, 3)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2 ** 3", "'**'"),
        ("9**9**9**9", "'**'"),
        ("7 // 2", "'//'"),
        ("7 % 2", "'%'"),
        ("1 << 100", "'<<'"),
        ("x + 1", "names"),
        ("abs(3)", "function calls"),
        ("__import__('os').system('true')", "function calls"),
        ("(3).real", "attributes"),
        ("[1, 2][0]", "indexing"),
        ("1, 2", "commas"),
        ("1 < 2", "comparisons"),
        ("1 and 2", "and/or"),
        ("lambda: 1", "lambdas"),
        ("1.5 + 1", "whole numbers"),
        ("1e3", "whole numbers"),
        ("'a' + 'b'", "whole numbers"),
        ("True + 1", "whole numbers"),
        ("-3 + 5", "Signs"),
        ("+3", "Signs"),
        ("0x14", "plain decimals"),
        ("1_000", "plain decimals"),
        ("0b11", "plain decimals"),
        ("10000000", "at most"),
        ("(1 + 2) * 3 = 9", "'='"),
        ("1 +", "not a valid expression"),
        ("(1 + 2", "not a valid expression"),
        ("", "empty"),
        ("   ", "empty"),
        ("1\x00", "not a valid expression"),
    ],
)
def test_rejects(text: str, reason: str) -> None:
    with pytest.raises(ArithError) as err:
        parse_expression(text)
    assert reason in str(err.value)


def test_literal_cap_is_configurable() -> None:
    assert evaluate("1000 + 1", max_literal=1000) == 1001
    with pytest.raises(ArithError, match="at most 999"):
        evaluate("1000 + 1", max_literal=999)


def test_long_input_rejected_before_parsing() -> None:
    text = "1+" * 10_000 + "1"
    start = time.perf_counter()
    with pytest.raises(ArithError, match=f"max {MAX_CHARS} characters"):
        parse_expression(text)
    assert time.perf_counter() - start < 0.1
    assert evaluate("1+" * 49 + "1") == 50  # 99 characters: still fine


def test_largest_allowed_value_stays_cheap() -> None:
    # the worst a 100-char expression can do: ~14 literals of 10**6 multiplied, ~10**84; instant
    text = "*".join(["999999"] * 14)
    assert len(text) <= MAX_CHARS
    assert evaluate(text) == 999999**14


def test_division_by_zero() -> None:
    with pytest.raises(ArithDivisionByZero):
        evaluate("4 / (2 - 2)")
    expr = parse_expression("3 / 0")  # parsing alone is fine: the numbers can be checked first
    assert expr.numbers == (3, 0)
    with pytest.raises(ZeroDivisionError):
        expr.value()


def test_format_fraction() -> None:
    assert format_fraction(Fraction(20)) == "20"
    assert format_fraction(Fraction(7, 2)) == "7/2"
    assert format_fraction(Fraction(-1, 3)) == "-1/3"
