"""Assistant-turn formats for SFT data: ReAct and ADaPT (TextCraft's planner / executor layout).

ReAct (Yao et al.): every assistant turn is

    Thought: <reasoning>
    Action: <the command the environment executes>

ADaPT (Prasad et al., the TextCraft prompts of archiki/ADaPT): two roles.
  * The planner decomposes a goal into steps joined by one logical operator:

        # Think: <why this step>          (optional, before any step)
        Step 1: <sub-goal>
        ...
        Step n: <sub-goal>
        # Think: <why this order>         (optional)
        Execution Order: (Step 1 AND ... AND Step n)        AND: all must succeed; OR: any one

  * The executor writes one raw command per turn (`get 1 oak log`, `craft 4 oak planks using
    1 oak log`, `inventory`), or a reasoning turn `think: <text>` which the environment answers
    with `OK.`; it ends a sub-goal with `think: ... Task Completed!` (or `Task Failed!`).

`render_conversation` rewrites a conversation's assistant turns (plain actions, e.g. our expert
demos or rollouts) into either format given one thought per assistant turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Style = Literal["plain", "react", "adapt"]
ADAPT_THINK_PREFIX = "think: "
ADAPT_THINK_OBSERVATION = "OK."
ADAPT_COMPLETED = "Task Completed!"
ADAPT_FAILED = "Task Failed!"

_REACT = re.compile(r"^\s*Thought:\s*(?P<thought>.*?)\s*\nAction:\s*(?P<action>.+?)\s*$", re.DOTALL)
_STEP = re.compile(r"^Step (\d+): (.+)$")
_ORDER = re.compile(r"^Execution Order: \((.*)\)$")


# -- ReAct -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReActTurn:
    thought: str
    action: str


def render_react(thought: str, action: str) -> str:
    """'Thought: {thought}\\nAction: {action}'; both must be non-empty and the action one line."""
    if not thought.strip():
        raise ValueError("a ReAct turn needs a non-empty thought")
    if not action.strip() or "\n" in action.strip():
        raise ValueError(f"a ReAct action must be one non-empty line, got {action!r}")
    return f"Thought: {thought.strip()}\nAction: {action.strip()}"


def parse_react(text: str) -> ReActTurn:
    """Inverse of `render_react`; raises ValueError when `text` is not 'Thought: ...\\nAction: ...'."""
    m = _REACT.match(text)
    if m is None:
        raise ValueError(f"not a ReAct turn (want 'Thought: ...\\nAction: ...'): {text[:80]!r}")
    return ReActTurn(m["thought"], m["action"])


# -- ADaPT -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaptPlan:
    """A planner output: steps (1-based in the text), their operator and optional '# Think:' lines.

    `thoughts[i]` precedes step i+1 (None: no think line); `order_thought` precedes the
    Execution Order line.
    """

    steps: tuple[str, ...]
    logic: Literal["AND", "OR"] = "AND"
    thoughts: tuple[str | None, ...] = ()
    order_thought: str | None = None

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("an ADaPT plan needs at least one step")
        if self.logic not in ("AND", "OR"):
            raise ValueError(f"ADaPT logic must be 'AND' or 'OR', got {self.logic!r}")
        if self.thoughts and len(self.thoughts) != len(self.steps):
            raise ValueError(f"{len(self.steps)} steps but {len(self.thoughts)} thoughts; give one per step or none")


def render_adapt_plan(plan: AdaptPlan) -> str:
    """The planner's text, e.g. 'Step 1: fetch 1 stick\\nExecution Order: (Step 1)'."""
    lines: list[str] = []
    thoughts = plan.thoughts or (None,) * len(plan.steps)
    for i, (step, thought) in enumerate(zip(plan.steps, thoughts), 1):
        if thought:
            lines.append(f"# Think: {thought}")
        lines.append(f"Step {i}: {step}")
    if plan.order_thought:
        lines.append(f"# Think: {plan.order_thought}")
    order = f" {plan.logic} ".join(f"Step {i}" for i in range(1, len(plan.steps) + 1))
    lines.append(f"Execution Order: ({order})")
    return "\n".join(lines)


def parse_adapt_plan(text: str) -> AdaptPlan:
    """Inverse of `render_adapt_plan` for flat plans (one operator, steps in order, no nesting)."""
    steps: list[str] = []
    thoughts: list[str | None] = []
    pending: str | None = None
    order: str | None = None
    for line in (ln.strip() for ln in text.strip().splitlines()):
        if line.startswith("# Think: "):
            pending = line[len("# Think: "):]
        elif (m := _STEP.match(line)) is not None:
            if int(m[1]) != len(steps) + 1:
                raise ValueError(f"ADaPT plan steps must be numbered 1, 2, ...; found Step {m[1]}")
            steps.append(m[2])
            thoughts.append(pending)
            pending = None
        elif (m := _ORDER.match(line)) is not None:
            order = m[1]
    if order is None:
        raise ValueError("ADaPT plan has no 'Execution Order: (...)' line")
    ops = set(re.findall(r"\b(AND|OR)\b", order))
    if len(ops) > 1 or "(" in order:
        raise ValueError(f"only flat plans with one operator are supported, got ({order})")
    return AdaptPlan(tuple(steps), ops.pop() if ops else "AND",
                     tuple(thoughts) if any(thoughts) else (), pending)


def adapt_plan_messages(goal: str, commands: Sequence[str], plan: AdaptPlan, system: str) -> list[dict[str, str]]:
    """The planner's own conversation: the crafting commands and goal, then the plan as the reply."""
    user = "Crafting commands:\n" + "\n".join(commands) + f"\n\nGoal: {goal}."
    return [{"role": "system", "content": system}, {"role": "user", "content": user},
            {"role": "assistant", "content": render_adapt_plan(plan)}]


def render_adapt_think(thought: str) -> str:
    """An executor reasoning turn: 'think: {thought}' (answered by the environment with 'OK.')."""
    if not thought.strip() or "\n" in thought.strip():
        raise ValueError(f"an ADaPT think turn must be one non-empty line, got {thought!r}")
    return ADAPT_THINK_PREFIX + thought.strip()


# -- whole conversations -----------------------------------------------------------------------
def render_conversation(
    messages: Sequence[Mapping[str, Any]], style: Style, thoughts: Sequence[str | None] | None = None,
) -> list[dict[str, Any]]:
    """Rewrite the assistant turns (each a plain action) in `style`; other turns are kept.

    `thoughts[k]` belongs to the k-th assistant turn. react: the turn becomes render_react(t, a)
    (every turn needs a thought). adapt: a thought t inserts [assistant 'think: t', user 'OK.']
    before the action turn; None keeps the action alone. plain: unchanged. Extra keys of a
    message (e.g. "loss") stay with its turn (and its inserted think turn).
    """
    n_asst = sum(m["role"] == "assistant" for m in messages)
    if style == "plain":
        return [dict(m) for m in messages]
    if style not in ("react", "adapt"):
        raise ValueError(f"unknown style {style!r}; use 'plain', 'react' or 'adapt'")
    thoughts = list(thoughts) if thoughts is not None else [None] * n_asst
    if len(thoughts) != n_asst:
        raise ValueError(f"{n_asst} assistant turns but {len(thoughts)} thoughts; give one per turn (None: none)")
    out: list[dict[str, Any]] = []
    k = 0
    for m in messages:
        if m["role"] != "assistant":
            out.append(dict(m))
            continue
        thought = thoughts[k]
        k += 1
        if style == "react":
            if thought is None:
                raise ValueError(f"assistant turn {k} has no thought; ReAct needs one for every turn")
            out.append({**m, "content": render_react(thought, m["content"])})
        else:
            if thought is not None:
                out.append({**m, "content": render_adapt_think(thought)})
                out.append({"role": "user", "content": ADAPT_THINK_OBSERVATION})
            out.append(dict(m))
    return out
