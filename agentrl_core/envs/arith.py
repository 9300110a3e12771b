"""Safe integer arithmetic: parse model text with `ast` against an allow-list, evaluate exactly.

Only binary + - * /, parentheses and non-negative integer literals are accepted. Values are exact
`fractions.Fraction`s (so 7 / 2 is 7/2, not 3.5). Never `eval`: a length cap and a literal cap
bound the work, so inputs like `9**9**9` are rejected before anything is computed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 100
"""Longest expression accepted (characters, after stripping)."""
MAX_LITERAL = 1_000_000
"""Largest integer literal accepted."""

_UNICODE_OPS = str.maketrans({"×": "*", "÷": "/", "−": "-", "–": "-"})
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_OP_NAMES = {
    ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<",
    ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
}


class ArithError(ValueError):
    """The text is not an allowed arithmetic expression; the message says why, briefly."""


class ArithDivisionByZero(ArithError, ZeroDivisionError):
    """The expression divides by zero."""


@dataclass(frozen=True)
class Expression:
    """A validated expression: its text, syntax tree and integer literals in reading order."""

    text: str
    tree: ast.expr
    numbers: tuple[int, ...]

    def value(self) -> Fraction:
        """The exact value; raises ArithDivisionByZero."""
        return _value(self.tree)


def parse_expression(text: str, *, max_chars: int = MAX_CHARS, max_literal: int = MAX_LITERAL) -> Expression:
    """Validate `text` (× ÷ − are read as * / -); raises ArithError with a short reason."""
    text = text.strip().translate(_UNICODE_OPS)
    if not text:
        raise ArithError("The expression is empty.")
    if len(text) > max_chars:
        raise ArithError(f"The expression is too long (max {max_chars} characters).")
    if "=" in text:
        raise ArithError("Write only the expression, without '='.")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        raise ArithError("It is not a valid expression.") from None
    numbers: list[int] = []
    _check(tree, numbers, max_literal, text)
    return Expression(text=text, tree=tree, numbers=tuple(numbers))


def evaluate(text: str, *, max_chars: int = MAX_CHARS, max_literal: int = MAX_LITERAL) -> Fraction:
    """Parse and evaluate `text` exactly."""
    return parse_expression(text, max_chars=max_chars, max_literal=max_literal).value()


def _check(node: ast.AST, numbers: list[int], max_literal: int, source: str) -> None:
    """Walk the tree; collect literals; reject every node outside the allow-list."""
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            shown = _OP_NAMES.get(type(node.op), type(node.op).__name__)
            raise ArithError(f"Only + - * / are allowed, not '{shown}'.")
        _check(node.left, numbers, max_literal, source)
        _check(node.right, numbers, max_literal, source)
    elif isinstance(node, ast.Constant):
        value = node.value
        # bool is an int subclass; `True` would otherwise count as 1
        if not isinstance(value, int) or isinstance(value, bool):
            raise ArithError(f"Only whole numbers are allowed, not {value!r}.")
        # Python also reads 0x14, 0b11 and 1_0 as ints; the puzzle wants plain decimals
        if not (ast.get_source_segment(source, node) or "").isdecimal():
            raise ArithError("Write numbers as plain decimals (like 14).")
        if value > max_literal:
            raise ArithError(f"Numbers must be at most {max_literal}.")
        numbers.append(value)
    elif isinstance(node, ast.UnaryOp):
        raise ArithError("Signs like -3 are not allowed; use only binary + - * /.")
    else:
        raise ArithError(f"Only numbers, + - * / and parentheses are allowed, not {_describe(node)}.")


def _describe(node: ast.AST) -> str:
    """A few words naming a forbidden node, for the feedback message."""
    names = {
        ast.Name: "names", ast.Call: "function calls", ast.Attribute: "attributes",
        ast.Subscript: "indexing", ast.Compare: "comparisons", ast.BoolOp: "and/or",
        ast.Tuple: "tuples or commas", ast.List: "lists", ast.Lambda: "lambdas",
    }
    return names.get(type(node), type(node).__name__)


def _value(node: ast.expr) -> Fraction:
    """Exact value of a tree that `_check` accepted."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    assert isinstance(node, ast.BinOp)
    left, right = _value(node.left), _value(node.right)
    op = type(node.op)
    if op is ast.Add:
        return left + right
    if op is ast.Sub:
        return left - right
    if op is ast.Mult:
        return left * right
    if right == 0:
        raise ArithDivisionByZero("The expression divides by zero.")
    return left / right


def format_fraction(value: Fraction) -> str:
    """'20' for whole values, '7/2' otherwise."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
