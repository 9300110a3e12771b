"""Fuzzy string similarity, pure Python: the token-set ratio WebShop's reward takes from `thefuzz`.

    ratio(a, b) = round(100 · 2·LCS(a, b) / (|a| + |b|))      (normalised InDel similarity)

token_set_ratio(a, b): lower-case both, keep letters and digits (everything else becomes a space),
split into word sets A and B; with I = sorted(A ∩ B) joined by spaces, and
c_ab = I + sorted(A − B), c_ba = I + sorted(B − A) (each joined by spaces, stripped):
  - 0 when either side has no words;
  - 100 when I is non-empty and one set contains the other;
  - otherwise the largest of ratio(I, c_ab), ratio(I, c_ba), ratio(c_ab, c_ba).
"""

from __future__ import annotations

import re
from functools import lru_cache

_NON_ALNUM = re.compile(r"[^0-9a-z]+")


def _tokens(text: str) -> set[str]:
    return set(_NON_ALNUM.sub(" ", text.lower()).split())


def _lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence (O(|a|·|b|) dynamic programme, one row)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for ch in a:
        prev_diag = 0
        for j, other in enumerate(b, start=1):
            saved = row[j]
            row[j] = prev_diag + 1 if ch == other else max(row[j], row[j - 1])
            prev_diag = saved
    return row[-1]


def ratio(a: str, b: str) -> int:
    """Normalised InDel similarity in [0, 100] (python-Levenshtein's / rapidfuzz's `ratio`)."""
    total = len(a) + len(b)
    if total == 0:
        return 100
    return round(100.0 * 2 * _lcs_length(a, b) / total)


@lru_cache(maxsize=65536)
def token_set_ratio(a: str, b: str) -> int:
    """Word-set similarity in [0, 100]; see the module docstring for the formula."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0
    inter, only_a, only_b = sorted(ta & tb), sorted(ta - tb), sorted(tb - ta)
    if inter and (not only_a or not only_b):
        return 100
    sect = " ".join(inter)
    c_ab = " ".join(inter + only_a)
    c_ba = " ".join(inter + only_b)
    scores = [ratio(c_ab, c_ba)]
    if sect:
        scores += [ratio(sect, c_ab), ratio(sect, c_ba)]
    return max(scores)
