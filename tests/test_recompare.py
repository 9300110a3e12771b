"""bench/recompare.py: every recorded paired comparison is what today's statistics compute from its 2x2 counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.recompare import RESULTS_DIR, recompute, table_of, update_file


def test_the_table_comes_back_from_the_recorded_counts():
    # 200 tasks, A solves 61%, 31 only A, 16 only B -> both 91, neither 62
    assert table_of(200, 0.61, 31, 16) == (91, 31, 16, 62)
    with pytest.raises(ValueError, match="inconsistent"):
        table_of(10, 0.1, 5, 0)


def test_recompute_matches_the_published_worked_example():
    # Altman et al. (2000) p. 52: (14, 5, 0, 22) -> +0.1220 [0.0115, 0.2265]
    c = recompute("a", "b", 41, 19 / 41, 5, 0)
    assert (c.diff, c.low, c.high) == pytest.approx((0.1220, 0.0115, 0.2265), abs=6e-5)


@pytest.mark.parametrize("path", sorted(RESULTS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_comparison_is_current(path: Path):
    # a change to the statistics that leaves recorded figures stale fails here: run bench/recompare.py --write
    for name, new, _ in update_file(path, write=False):
        doc = json.loads(path.read_text())
        listed = {f"{c['a']}-{c['b']}": c for c in doc.get("comparisons") or []}
        stored = listed.get(name) or {k: doc["figures"][f"comparisons/{name}/{k}"] for k in ("diff", "low", "high")}
        assert (stored["low"], stored["high"]) == pytest.approx((new.low, new.high), abs=1e-12), name


def test_write_keeps_what_was_first_printed(tmp_path: Path):
    doc = {"tests": {"x": {"success_rate": 0.5}, "y": {"success_rate": 0.4}},
           "comparisons": [{"a": "x", "b": "y", "n": 10, "diff": 0.1, "low": -0.2, "high": 0.3,
                            "method": "paired Newcombe", "a_only": 2, "b_only": 1}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    (_, new, old), = update_file(path, write=True)
    written = json.loads(path.read_text())
    assert written["comparisons_as_printed"] == {"x-y": {"diff": 0.1, "low": -0.2, "high": 0.3}}
    assert written["comparisons"][0]["low"] == new.low and written["comparisons_recomputed"]["by"]
    (_, again, old_again), = update_file(path, write=True)  # idempotent: the first printed values stay
    assert old_again == old and again == new
