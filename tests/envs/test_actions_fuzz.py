"""Fuzzing every env's action parser with model outputs: each one is a valid step (an invalid action is an
observation), answered within a time limit, with JSON-safe info, whatever the text."""

from __future__ import annotations

import json
import time
from typing import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl_core.envs import Env, make
from agentrl_core.envs.env_checker import check_step_result
from tests.envs.conftest import every_env
from tests.fuzzing import Tally, fuzz_settings, model_text

CI_EXAMPLES = {"alfworld": 100, "sciworld": 100}  # a reset costs about a second there
"""Examples per env in CI (default DEFAULT_CI_EXAMPLES); AGENTRL_FUZZ_EXAMPLES overrides them all."""
DEFAULT_CI_EXAMPLES = 200
STEP_LIMIT_S = 10.0
"""The slowest answer accepted for one action (SQL's own query limit is 2 s; the rest answer in ms)."""
MAX_OBSERVATION_CHARS = 50_000
"""An observation goes into the model's context: echoing a huge action back in full is not an answer."""

TEMPLATES = [
    "{x}", "<answer>{x}</answer>", "<search>{x}</search>", "<answer>{x}", "Action: {x}", "Thought: hm\nAction: {x}",
    "click[{x}]", "search[{x}]", "```json\n{x}\n```", "[{x}]", "```sql\n{x}\n```", "{x}\n{x}", "  {x}  ", "{x}\x00",
    '[{{"name": "{x}", "arguments": {{}}}}]', "{x}(a=1, b='c')", "SELECT {x} FROM t", "craft 1 {x} using 2 {x}",
]
"""Shapes models answer in across the envs (tags, ReAct, WebShop's verbs, JSON and Python calls, SQL)."""

ADVERSARIAL = [
    "(" * 5000 + "1" + ")" * 5000, "9**9**9**9", "10**1000000", "1" * 100_000, "a" * 200_000, "{" * 10_000,
    "[" * 10_000, "f(" * 3000, "<answer>" * 5000, "\x00" * 50, "\r\n" * 1000, "\u202e\u0000\ufeff", "0/0", "1/0",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r) SELECT count(*) FROM r", "ATTACH 'x' AS y",
    "__import__('os').system('id')", "exec('1')", "eval('1')", "open('/etc/passwd').read()", "a" * 50_000 + "!",
    '{"name": "' + "x" * 100_000 + '"}', "<search>" + "q " * 20_000 + "</search>", "search[" + "]" * 10_000,
]
"""Inputs that break careless parsers: deep nesting, huge literals, runaway SQL, eval bait, giant strings."""


def vocabulary(env: Env, info: dict) -> list[str]:
    """Words of this env's own actions: its available actions and its expert's next action."""
    words = [str(a) for key in ("available_actions", "admissible_actions") for a in (info.get(key) or [])
             if isinstance(a, str)]
    try:
        words.append(env.expert_action())
    except Exception:  # noqa: BLE001 - some envs have no expert move in some states; the vocabulary is a hint
        pass
    return words[:50] or ["look"]


MUTATIONS = [lambda w: w, str.upper, lambda w: w[: len(w) // 2], lambda w: w * 3, lambda w: w.replace(" ", "  ")]


class EnvWord:
    """An action of the env's own vocabulary, picked and mutated when the env's state is known. The draw
    itself (an index, a mutation, some padding) does not depend on that state, as hypothesis requires."""

    def __init__(self, index: int, mutation: int, before: str, after: str) -> None:
        self.index, self.mutation, self.before, self.after = index, mutation, before, after

    def text(self, words: list[str]) -> str:
        return self.before + MUTATIONS[self.mutation](words[self.index % len(words)]) + self.after


def env_words() -> st.SearchStrategy[EnvWord]:
    padding = st.one_of(st.just(""), st.just(""), model_text(20))
    return st.builds(EnvWord, st.integers(0, 49), st.integers(0, len(MUTATIONS) - 1), padding, padding)


def outputs() -> st.SearchStrategy[str | EnvWord | tuple[str, str | EnvWord]]:
    """One model reply: free text, an env action mutated, a templated answer, or a parser trap."""
    inner = st.one_of(model_text(60), env_words(), st.integers().map(str))
    return st.one_of(model_text(), env_words(), st.tuples(st.sampled_from(TEMPLATES), inner),
                     st.tuples(st.sampled_from(TEMPLATES), inner), st.sampled_from(ADVERSARIAL))


def render(drawn: str | EnvWord | tuple, words: list[str]) -> str:
    """The reply text of a drawn output, given the env's current vocabulary."""
    if isinstance(drawn, EnvWord):
        return drawn.text(words)
    if isinstance(drawn, tuple):
        template, inner = drawn
        return template.replace("{x}", render(inner, words))
    return drawn


class Episode:
    """One env playing task after task: each action steps it, a finished episode is reset to the next task."""

    def __init__(self, name: str) -> None:
        self.env = make(name)
        self.tasks = list(self.env.task_ids("train")[:5])
        self.resets = 0
        self.info = self.reset()

    def reset(self) -> dict:
        _, info = self.env.reset(task_id=self.tasks[self.resets % len(self.tasks)], seed=self.resets)
        self.resets += 1
        return info

    def step(self, action: str) -> str:
        """Step with `action`, check the result; returns 'valid' or 'valid, episode ended'."""
        start = time.monotonic()
        result = self.env.step(action)
        elapsed = time.monotonic() - start
        check_step_result(self.env, result, action)
        assert elapsed < STEP_LIMIT_S, f"step took {elapsed:.1f} s for {action[:100]!r}"
        assert len(result.observation) <= MAX_OBSERVATION_CHARS, (len(result.observation), action[:100])
        json.dumps(result.info)  # the server sends it as JSON
        self.info = {**self.info, **result.info}
        if result.terminated or result.truncated:
            self.info = self.reset()
            return "valid, episode ended"
        return "valid"


@pytest.fixture(params=every_env())
def episode(request) -> Iterator[Episode]:
    ep = Episode(request.param)
    yield ep
    ep.env.close()


@pytest.mark.slow
def test_fuzz_action_parsers(episode: Episode) -> None:
    name = episode.env.name
    tally = Tally(f"actions {name}")

    @fuzz_settings(ci_examples=CI_EXAMPLES.get(name, DEFAULT_CI_EXAMPLES))
    @given(drawn=outputs())
    def one(drawn: str | EnvWord | tuple) -> None:
        tally.add(episode.step(render(drawn, vocabulary(episode.env, episode.info))))

    one()
    tally.report()
