"""Record a command that is not a benchmark (the demo, the test suite) the way benchmarks are recorded.

Runs the command, its console teed, and writes `bench/results/<NAME>.json` and `.txt`
(`bench/recording.py`) with its wall time, its exit status and the figures its output or files hold:
- `--pytest`: the counts of pytest's closing line (passed, failed, skipped, errors, deselected);
- `--json-figures FILE [--json-keys a,b]`: every number of a JSON file the command writes (e.g. the
  run report's `runs/math-learn/report/eval.json`), flattened to `key/subkey` names (its strings go to
  "texts"); list items are named by their "model", "name" or "label" field, comparisons "A-B" (of success)
  or "metric:A-B" (of an episode metric, e.g. "well_formed:sft-base").
A command that fails is recorded only with `--allow-failure` (a test suite with failures is a figure too):
its exit status becomes the figure `exit_status` and this recorder's `main` returns 0, since a run that
exits non-zero records nothing (`bench/recording.py`).

    .venv/bin/python bench/record_command.py --record demo_math_learn --json-figures runs/math-learn/report/eval.json \
        --json-keys rows,comparisons -- .venv/bin/agentrl run math_learn
    .venv/bin/python bench/record_command.py --record test_suite --pytest -- .venv/bin/python -m pytest -q
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recording import ROOT, current, run_recorded  # noqa: E402

PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)")
PYTEST_TIME = re.compile(r" in ([\d.]+)s")


def pytest_figures(output: str) -> dict[str, float]:
    """The counts and seconds of pytest's closing line ("== 3 passed, 1 skipped in 2.50s ==" or "-q" form)."""
    for line in reversed(output.splitlines()):
        counts = PYTEST_COUNT.findall(line)
        if counts and PYTEST_TIME.search(line):
            figures = {"passed": 0.0, "failed": 0.0, "skipped": 0.0, "errors": 0.0}
            figures |= {("errors" if kind.startswith("error") else kind.rstrip("s") if kind.startswith("warning")
                         else kind): float(n) for n, kind in counts}
            figures["pytest_seconds"] = float(PYTEST_TIME.search(line).group(1))
            return figures
    raise ValueError("no pytest closing line (e.g. '12 passed in 3.4s') in the command's output")


def _label(item: Any, index: int) -> str:
    """A list item's name in a flattened key: its "model"/"name"/"label", "A-B" for a comparison of success
    ("metric:A-B" for one of an episode metric), else its index."""
    if isinstance(item, dict):
        for key in ("model", "name", "label"):
            if isinstance(item.get(key), str):
                return item[key]
        if isinstance(item.get("a"), str) and isinstance(item.get("b"), str):
            metric = item.get("metric", "success")
            return f"{item['a']}-{item['b']}" if metric == "success" else f"{metric}:{item['a']}-{item['b']}"
    return str(index)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Every number and string leaf of a JSON value as {"a/b/c": value} (booleans and nulls are left out)."""
    if isinstance(data, bool) or data is None:
        return {}
    if isinstance(data, (int, float, str)):
        return {prefix: data}
    items = data.items() if isinstance(data, dict) else \
        ((_label(v, i), v) for i, v in enumerate(data)) if isinstance(data, list) else ()
    out: dict[str, Any] = {}
    for key, value in items:
        out |= flatten(value, f"{prefix}/{key}" if prefix else str(key))
    return out


def json_figures(data: dict[str, Any], keys: list[str] | None) -> tuple[dict[str, float], dict[str, str]]:
    """(numbers, texts) of the JSON document's `keys` (all when None), flattened."""
    leaves = flatten({k: v for k, v in data.items() if keys is None or k in keys})
    return ({k: float(v) for k, v in leaves.items() if not isinstance(v, str)},
            {k: v for k, v in leaves.items() if isinstance(v, str)})


def run_teed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit status, console) of `command`, its output passed through as it comes and kept for the figures.
    A command started from a background job would inherit SIGINT ignored; it runs as it would in a terminal."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for raw in proc.stdout:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        lines.append(raw.decode("utf-8", errors="replace"))
    return proc.wait(), "".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pytest", action="store_true", help="take pytest's closing counts as figures")
    p.add_argument("--json-figures", help="a JSON file the command writes: its numbers become figures")
    p.add_argument("--json-keys", help="comma-separated top-level keys of that file to take (default: all)")
    p.add_argument("--allow-failure", action="store_true", help="record even when the command exits non-zero")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        p.error("give the command after --")
    return args


def main() -> int:
    args = parse(sys.argv[1:])
    start = time.perf_counter()
    status, output = run_teed(args.command, ROOT)
    wall = time.perf_counter() - start
    if status and not args.allow_failure:
        print(f"[record] the command exited with status {status}: not recorded (--allow-failure records it)")
        return status
    figures = {"wall_s": wall, "wall_min": wall / 60, "exit_status": float(status)}
    if args.pytest:
        figures |= pytest_figures(output)
    texts: dict[str, str] = {}
    if args.json_figures:
        numbers, texts = json_figures(json.loads((ROOT / args.json_figures).read_text()),
                                      args.json_keys.split(",") if args.json_keys else None)
        figures |= numbers
    current().report(figures, texts=texts, recorded_command=" ".join(shlex.quote(a) for a in args.command))
    return 0  # with --allow-failure a failed command is a figure (exit_status), and this run a success


if __name__ == "__main__":
    if not any(a == "--record" or a.startswith("--record=") for a in sys.argv[1:sys.argv.index("--")]
               if "--" in sys.argv):
        sys.exit("usage: bench/record_command.py --record NAME [--pytest] [--json-figures FILE] -- COMMAND ...")
    sys.exit(run_recorded("command", main))
