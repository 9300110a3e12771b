"""agentrl's RL math against verl 0.9.1: the differential test's comparisons, run once, as a table.

Runs every comparison of `tests/algorithms/verl_reference.py` (the cases of
tests/algorithms/test_verl_reference.py, whose docstring lists the differences and tolerances) and prints
one line per comparison: cases, the largest absolute and relative difference agentrl - verl in float64 and
in float32, and the verdict (equal / documented difference / FAIL). Exits 1 if any comparison fails.
verl is the test-only install of scripts/setup.sh. `--json PATH` writes the rows, for recording:

    .venv/bin/python bench/record_command.py --record verl_reference --json-figures /tmp/verl_reference.json \
        --json-keys rows,totals -- .venv/bin/python bench/verl_reference.py --json /tmp/verl_reference.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.algorithms import verl_reference as vr  # noqa: E402


def slug(name: str) -> str:
    """A row's name as a figure key: lower case, runs of other characters as one "_"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="also write the rows and totals to this JSON file")
    args = p.parse_args()
    start = time.perf_counter()
    verl = vr.load_verl()
    rows = [row for name in vr.COMPARISONS for row in vr.run(name, verl)]
    print(f"agentrl vs verl {verl.version}\n{vr.format_table(rows)}")
    failed = [r for r in rows if r.failures]
    totals = {"comparisons": len(rows), "cases": sum(r.cases for r in rows), "failed": len(failed),
              "documented_differences": sum(bool(r.documented) for r in rows), "seconds": time.perf_counter() - start}
    print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in totals.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "verl": verl.version,
            "rows": [{"name": slug(r.name), "comparison": r.name, "cases": r.cases, "verdict": r.verdict,
                      "documented": r.documented, "max_abs_f64": r.max_abs["float64"],
                      "max_rel_f64": r.max_rel["float64"], "max_abs_f32": r.max_abs["float32"],
                      "max_rel_f32": r.max_rel["float32"], "failures": r.failures} for r in rows],
            "totals": totals}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
