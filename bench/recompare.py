"""Re-derive every recorded paired comparison with today's statistics, from the 2x2 counts its results file keeps.

A paired comparison of two models on the same n tasks is fully determined by its 2x2 table (both solved,
only A, only B, neither). Every results file keeps what gives that table: n, a_only and b_only beside the
comparison, and model A's success rate (its `tests/<A>/success_rate`, or the flat figure
`rows/<A>/success_rate`), so both = n * p_A - a_only. This script recomputes the difference, its interval
and verdict with `agentrl_core.evaluation.stats.newcombe_paired_counts` and prints the recorded and the
recomputed values side by side. With `--write` it rewrites the comparisons in place and keeps the values as
first printed under `comparisons_as_printed` (with `comparisons_recomputed` saying by what and when), so the
figure tables of README.md and docs/ (rendered from these files) show today's method while the raw console
output stays as it was; a figure quoted in running text is checked against both (`bench/prose_figures.py`).

    .venv/bin/python bench/recompare.py                # print recorded vs recomputed, change nothing
    .venv/bin/python bench/recompare.py --write        # and update bench/results/*.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl_core.evaluation.stats import Comparison, newcombe_paired_counts  # noqa: E402
from bench.recording import RESULTS_DIR  # noqa: E402

METHOD = "paired Newcombe"
WHY = ("Newcombe (1998) method 10 with its continuity-corrected phi (ad - bc - n/2), as its R implementations; "
       "recorded with the raw phi, slightly too narrow")


def table_of(n: int, p_a: float, a_only: int, b_only: int) -> tuple[int, int, int, int]:
    """(both, a_only, b_only, neither) of a paired comparison from n, A's success rate and the discordant counts."""
    both = round(n * p_a) - a_only
    neither = n - both - a_only - b_only
    if min(both, neither) < 0:
        raise ValueError(f"inconsistent counts: n={n}, p_A={p_a}, a_only={a_only}, b_only={b_only}")
    return both, a_only, b_only, neither


def recompute(a: str, b: str, n: int, p_a: float, a_only: int, b_only: int) -> Comparison:
    """The comparison A - B from its counts, with today's `newcombe_paired_counts` (its McNemar p is unchanged)."""
    from agentrl_core.evaluation.stats import mcnemar_exact_p

    theta, low, high = newcombe_paired_counts(*table_of(n, p_a, a_only, b_only))
    return Comparison(a, b, n, theta, low, high, METHOD, mcnemar_exact_p(a_only, b_only), a_only, b_only)


def listed_comparisons(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], float]]:
    """(comparison dict, A's success rate) for each entry of a results file's `comparisons` list."""
    for item in doc.get("comparisons") or []:
        if item.get("method") == METHOD and item.get("metric", "success") == "success":
            yield item, float(doc["tests"][item["a"]]["success_rate"])


def flat_comparisons(figures: dict[str, float]) -> Iterator[tuple[str, str, str]]:
    """(key prefix, A, B) for flat figures `comparisons/<A>-<B>/...` whose A and B are `rows/<name>` models."""
    models = {k.split("/")[1] for k in figures if k.startswith("rows/")}
    for key in figures:
        if key.startswith("comparisons/") and key.endswith("/a_only"):
            pair = key.split("/")[1]
            for a in models:
                if pair.startswith(a + "-") and pair[len(a) + 1:] in models:
                    yield f"comparisons/{pair}", a, pair[len(a) + 1:]


def update_file(path: Path, write: bool) -> list[tuple[str, Comparison, dict[str, float]]]:
    """Recompute one results file's paired comparisons: [(name, new, old figures)]; rewrite it when `write`."""
    doc = json.loads(path.read_text())
    changes: list[tuple[str, Comparison, dict[str, float]]] = []
    printed = doc.get("comparisons_as_printed")  # set by an earlier --write: the values first printed
    for item, p_a in listed_comparisons(doc):
        new = recompute(item["a"], item["b"], int(item["n"]), p_a, int(item["a_only"]), int(item["b_only"]))
        name = f"{item['a']}-{item['b']}"
        changes.append((name, new, (printed or {}).get(name) or {k: item[k] for k in ("diff", "low", "high")}))
        item.update(new.to_dict())
    figures = doc.get("figures", {})
    for prefix, a, b in list(flat_comparisons(figures)):
        new = recompute(a, b, int(figures[f"{prefix}/n"]), figures[f"rows/{a}/success_rate"],
                        int(figures[f"{prefix}/a_only"]), int(figures[f"{prefix}/b_only"]))
        changes.append((f"{a}-{b}", new, (printed or {}).get(f"{a}-{b}")
                        or {k: figures[f"{prefix}/{k}"] for k in ("diff", "low", "high")}))
        figures.update({f"{prefix}/{k}": getattr(new, k) for k in ("diff", "low", "high")})
        doc.setdefault("texts", {})[f"{prefix}/verdict"] = new.verdict
    if write and changes:
        doc["comparisons_as_printed"] = printed or {name: old for name, _, old in changes}
        doc["comparisons_recomputed"] = {"by": "bench/recompare.py", "method": WHY,
                                         "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        path.write_text(json.dumps(doc, indent=2) + "\n")
    return changes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="rewrite the results files' comparisons")
    p.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    print(f"{'results file':44} {'comparison':30} {'recorded (diff [low, high])':30} recomputed  verdict")
    verdicts_changed = 0
    for path in sorted(args.results.glob("*.json")):
        for name, new, old in update_file(path, args.write):
            old_verdict = Comparison(new.a, new.b, new.n, old["diff"], old["low"], old["high"], METHOD).verdict
            verdicts_changed += old_verdict != new.verdict
            print(f"{path.stem:44} {name:30} {100 * old['diff']:+5.1f} [{100 * old['low']:+5.1f}, "
                  f"{100 * old['high']:+5.1f}]{'':9} [{100 * new.low:+5.1f}, {100 * new.high:+5.1f}]  {new.verdict}"
                  + ("  (verdict CHANGED)" if old_verdict != new.verdict else ""))
    print(f"verdicts changed: {verdicts_changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
