"""TextWorld's grammar parses, memoized: the ALFWorld engine about twice as fast, its text unchanged.

TextWorld (1.7.0) parses text with TatSu grammars again every time it needs it: each step re-parses the
templates of the observation it writes (textgen's `derive`) and the conditions of the rules it checks (logic's
`Rule.parse_conjunctive_query`), and each game load re-parses the same grammar and domain. The texts repeat,
so the parse is a pure function of (text, rule): here each of the two module-level parse functions,
`textworld.envs.pddl.textgen._parse_and_convert` and `textworld.logic._parse_and_convert`, is wrapped by a
per-process LRU cache that hands out a deep copy of the parsed result (TextWorld sets contexts on the symbols
it gets back, so no caller may share one). `bench/bench_alfworld_engine.py` plays the same games both ways
(generation with its planner calls, reset, probes, the planner's replay): about 1.8x faster per game, with
identical transcripts; `tests/envs/test_alfworld.py` checks the text is the same as without the cache.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable

CACHED_PARSES = 4096
"""Distinct (text, rule) parses kept per module: a game's templates and conditions are a few hundred."""
_INSTALLED_MARK = "__agentrl_parse_cache__"


def memoized(parse: Callable[..., Any]) -> Callable[..., Any]:
    """`parse(text, rule_name=..., trace=...)` answered from a cache of its results, each answer a deep copy.

    A call with arguments other than a text and a rule name (TatSu's own options) goes to `parse` itself."""
    cached = functools.lru_cache(maxsize=CACHED_PARSES)(lambda text, rule_name: parse(text, rule_name=rule_name))

    def parse_memoized(text: Any = None, *args: Any, rule_name: str | None = None, trace: bool = False,
                       **kwargs: Any) -> Any:
        if args or kwargs or trace or not isinstance(text, str):
            return parse(text, *args, rule_name=rule_name, trace=trace, **kwargs)
        return copy.deepcopy(cached(text, rule_name))

    setattr(parse_memoized, _INSTALLED_MARK, parse)
    parse_memoized.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return parse_memoized


def install() -> None:
    """Memoize both of TextWorld's parse functions in this process (idempotent)."""
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module in (textgen, logic):
        if not hasattr(module._parse_and_convert, _INSTALLED_MARK):
            module._parse_and_convert = memoized(module._parse_and_convert)


def uninstall() -> None:
    """Put TextWorld's own parse functions back (for the test that compares the text with and without)."""
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module in (textgen, logic):
        module._parse_and_convert = getattr(module._parse_and_convert, _INSTALLED_MARK, module._parse_and_convert)
