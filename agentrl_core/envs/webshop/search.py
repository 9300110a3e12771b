"""BM25 search over the catalogue (rank_bm25.BM25Okapi; WebShop uses Lucene BM25 through pyserini).

A product's document is its `search_text()` (title, description, features, attributes, option
values), lower-cased and split into letter/digit words, stopwords dropped. A query returns the
indices of the `SEARCH_RETURN_N` (50, as WebShop) best-scoring products with a positive score,
best first, ties broken by catalogue order; the results pages show `PRODUCT_WINDOW` (10) each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from agentrl_core.envs.webshop.catalog import Catalog

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and the of for with in on to by from or at as is are be i me my need want looking am find "
    "it its this that price lower than dollars".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-case letter/digit words without stopwords."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class SearchIndex:
    """BM25 over a catalogue's products (immutable once built; safe to share within a process).

    score(doc, query) = Σ_{t in query} BM25Okapi(doc, [t]); the per-word score vectors come from
    rank_bm25's `get_scores([t])` and are memoised (at most `TERM_CACHE` words), so a search costs
    one vector sum per word instead of a pass over every document's term counts per word.
    """

    TERM_CACHE = 512

    def __init__(self, catalog: Catalog) -> None:
        from functools import lru_cache as _memo

        from rank_bm25 import (
            BM25Okapi,  # imported here so importing the env module stays light
        )

        self.catalog = catalog
        self._bm25: Any = BM25Okapi([tokenize(p.search_text()) for p in catalog.products])
        self._term_scores = _memo(maxsize=self.TERM_CACHE)(self._score_term)

    def _score_term(self, word: str) -> Any:
        scores = self._bm25.get_scores([word])
        scores.setflags(write=False)  # shared through the memo: never modified
        return scores

    def scores(self, words: Sequence[str]) -> Any:
        """BM25 scores of every product for the query words (a numpy vector)."""
        import numpy as np  # a dependency of rank_bm25

        total = np.zeros(len(self.catalog), dtype=np.float64)
        for word in words:
            if word in self._bm25.idf:  # words outside the vocabulary score 0 everywhere
                total += self._term_scores(word)
        return total

    def search(self, query: str, limit: int = SEARCH_RETURN_N) -> tuple[int, ...]:
        """Indices of the best `limit` products for `query` (score > 0), best first."""
        import numpy as np  # a dependency of rank_bm25

        scores = self.scores(tokenize(query))
        ranked = np.argsort(-scores, kind="stable")[:limit]  # stable: ties keep catalogue order
        return tuple(int(i) for i in ranked if scores[i] > 0)


@lru_cache(maxsize=4)
def get_index(catalog: Catalog) -> SearchIndex:
    """The index of `catalog`, built once per process and catalogue."""
    return SearchIndex(catalog)


def page_of(results: Sequence[int], page: int) -> Sequence[int]:
    """The products shown on results page `page` (1-based)."""
    return results[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]


def page_count(results: Sequence[int]) -> int:
    """How many results pages there are (at least 1, an empty page for no results)."""
    return max(1, -(-len(results) // PRODUCT_WINDOW))
