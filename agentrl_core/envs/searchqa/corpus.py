"""The SearchQA corpus: short passages stating the world's facts, and a BM25 index over them.

Two passages per person (early life; career), two per organisation (founding; location), one per
city and one per country: about 1,900 passages. The index (rank_bm25's BM25Okapi over title + text,
lower-cased word tokens without a few stop words) is built once per process. Search results are
formatted as Search-R1 formats its retriever's: "Doc i(Title: <title>) <text>" lines inside
<information>...</information>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentrl_core.envs.searchqa.world import World, make_world

MAX_QUERY_TOKENS = 64  # longer queries are cut (BM25 cost grows with query length)
_TOKEN = re.compile(r"[a-z0-9]+")
STOP_WORDS = frozenset(
    "a an the of in on at to is was were be been by for from and or what which who whom where when how "
    "does did do it its this that as with".split()
)


@dataclass(frozen=True)
class Passage:
    """One retrievable passage; `key` names the fact group it states, e.g. ("person-born", name)."""

    title: str
    text: str
    key: tuple[str, str]


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens without stop words (used for documents and queries alike)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS]


def _first(name: str) -> str:
    return name.split()[0]


def _a(noun: str) -> str:
    """The noun with its indefinite article ("an engineer", "a painter")."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def build_passages(world: World) -> tuple[Passage, ...]:
    """Every passage of `world`, in a fixed order."""
    out: list[Passage] = []
    for p in world.people:
        out.append(Passage(p.name, f"{p.name} was born in {p.birthplace} in {p.born}. "
                           f"{_first(p.name)} is {_a(p.occupation)} by profession.", ("person-born", p.name)))
        out.append(Passage(p.name, f"{p.name} is employed by {p.employer}, where {_first(p.name)} has worked "
                           f"for {p.tenure} years.", ("person-employer", p.name)))
    for o in world.orgs:
        out.append(Passage(o.name, f"{o.name} was founded by {o.founder} in {o.founded}. It is {_a(o.industry)} "
                           "company.", ("org-founded", o.name)))
        out.append(Passage(o.name, f"{o.name} is headquartered in {o.headquarters}. The company has about "
                           f"{o.employees} employees.", ("org-headquarters", o.name)))
    for c in world.cities:
        out.append(Passage(c.name, f"{c.name} is a city in the country of {c.country}. It has a population of "
                           f"about {c.population}.", ("city", c.name)))
    for k in world.countries:
        out.append(Passage(k.name, f"{k.name} is a country whose capital is {k.capital}. Its currency is the "
                           f"{k.currency}.", ("country", k.name)))
    return tuple(out)


class Index:
    """BM25 over the passages; `search` returns the indices of the top-k passages, best first."""

    def __init__(self, passages: tuple[Passage, ...]) -> None:
        from rank_bm25 import BM25Okapi  # the core dependency rank-bm25, imported when first needed

        self.passages = passages
        self._bm25: Any = BM25Okapi([tokenize(f"{p.title} {p.text}") for p in passages])

    def search(self, query: str, k: int) -> list[int]:
        """Top-k passage indices by BM25 score; ties keep corpus order. Empty for a query without tokens."""
        tokens = tokenize(query)[:MAX_QUERY_TOKENS]
        if not tokens:
            return []
        import numpy as np  # comes with rank-bm25

        scores = self._bm25.get_scores(tokens)
        return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


@lru_cache(maxsize=1)
def corpus() -> tuple[Passage, ...]:
    """The one corpus (deterministic; built once per process)."""
    return build_passages(make_world())


@lru_cache(maxsize=1)
def index() -> Index:
    """The BM25 index of the corpus (built once per process, read-only afterwards)."""
    return Index(corpus())


def format_results(passages: list[Passage]) -> str:
    """Search-R1's layout: '<information>Doc 1(Title: T) text\\nDoc 2(...) ...\\n</information>'."""
    docs = "".join(f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1))
    return f"<information>{docs}</information>"
