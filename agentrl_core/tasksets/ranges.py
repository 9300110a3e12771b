"""Task-id ranges: text such as "0-99,200,300-310" (inclusive bounds) to id lists and back.

Grammar: comma-separated items, each `N` or `A-B` with integers 0 <= A <= B; `A-B` means every id
A, A+1, …, B (both ends included, so AgentGym's half-open ALFWorld train split [0, 2420) is
"0-2419"). Spaces are ignored. Order is kept as written; an id may appear only once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MAX_IDS = 10_000_000
"""Most ids one range text may expand to (a typo such as "0-9999999999" fails instead of filling memory)."""

_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_ranges(text: str) -> list[int]:
    """The ids of `text` in the order written; ValueError names the bad item and the grammar."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty id range {text!r}: write ids like '0-99,200,300-310' (inclusive)")
    ids: list[int] = []
    seen: set[int] = set()
    for item in text.replace(" ", "").split(","):
        match = _ITEM.match(item)
        if not match:
            raise ValueError(
                f"bad id range item {item!r} in {text!r}: each item is N or A-B with integers "
                "0 <= A <= B (inclusive), e.g. '0-99,200,300-310'"
            )
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ValueError(f"bad id range item {item!r} in {text!r}: the end {high} is below the start {low}")
        if len(ids) + high - low + 1 > MAX_IDS:
            raise ValueError(f"id range {text!r} expands to more than {MAX_IDS:,} ids")
        repeated = [i for i in range(low, high + 1) if i in seen]
        if repeated:
            raise ValueError(f"id range {text!r} names id(s) {format_ranges(sorted(repeated))} more than once")
        ids.extend(range(low, high + 1))
        seen.update(range(low, high + 1))
    return ids


def format_ranges(ids: Iterable[int]) -> str:
    """The shortest range text of a set of ids, sorted: [0, 1, 2, 5, 7, 8] → "0-2,5,7-8"."""
    values = sorted(set(int(i) for i in ids))
    if any(v < 0 for v in values):
        raise ValueError(f"task ids must be >= 0, got {values[0]}")
    parts: list[str] = []
    start = prev = None
    for value in values + [None]:  # the sentinel flushes the last run
        if start is not None and value == prev + 1:
            prev = value
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    return ",".join(parts)


def select_ids(available: Sequence[int], wanted: str | Sequence[int], *, where: str = "the server") -> list[int]:
    """The ids of `wanted` (range text or ids), in that order, after checking `available` has each.

    ValueError lists the missing ids as ranges and what `where` does offer.
    """
    ids = parse_ranges(wanted) if isinstance(wanted, str) else [int(i) for i in wanted]
    offered = set(available)
    missing = [i for i in ids if i not in offered]
    if missing:
        have = format_ranges(offered) if offered else "nothing"
        if len(have) > 200:
            have = have[:200] + "…"
        raise ValueError(
            f"{len(missing)} requested task id(s) are not offered by {where}: {format_ranges(missing)}; "
            f"it offers {have}"
        )
    return ids
