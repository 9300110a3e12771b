"""The test suite's wall time and line coverage, each recorded: where the time goes and what the tests reach.

    .venv/bin/python bench/bench_test_suite.py                    # both parts, one after the other
    .venv/bin/python bench/bench_test_suite.py --part timing      # bench/results/test_suite.{json,txt}
    .venv/bin/python bench/bench_test_suite.py --part coverage    # bench/results/test_coverage.{json,txt}
    .venv/bin/python bench/bench_test_suite.py --tree ../old --record-suffix _before   # another checkout

Two runs of the README's test command (`python -m pytest -q`, the suite's own settings: every test, in
parallel as `pyproject.toml` says), never mixed, since coverage slows what it measures:

1. **timing**: `pytest -q --durations=0 -p no:cacheprovider`. Figures: the counts and wall minutes of
   pytest's closing line, each module's seconds (setup + call + teardown of its tests, summed over the
   workers: the work, not the wall time), the ten slowest tests, and how busy the CPUs were over the run
   (from /proc/stat: where the parallel workers leave cores idle), and the CPU seconds of every process the
   suite started, summed by kind (`bench/process_cpu.py`: pytest's workers, `agentrl run`, Prefect's servers,
   env servers and workers, Ray actors, JVMs, compilers...): where the CPU goes, not only the waits.
2. **coverage**: the same tests under coverage.py, measuring the packages `agentrl_core`, `flows`, `tasks`
   and `agentrl` in *every* Python process the tests start (`[run] patch = subprocess`: `agentrl run`, env
   and Prefect servers, Ray workers; `sigterm = true` saves a process ended by SIGTERM), the data files
   then combined. Figures: line coverage, total and per package (statements, covered, percent).

`--tree DIR` measures another checkout of the repository with this venv (its sources first on
PYTHONPATH, its git revision recorded): how the "before" figures of a change are taken at the old commit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.process_cpu import ProcessSampler  # noqa: E402
from bench.record_command import pytest_figures, run_teed  # noqa: E402
from bench.recording import ROOT, current, git_state, run_recorded, split_record_args  # noqa: E402

PACKAGES = ("agentrl_core", "flows", "tasks", "agentrl")
"""What line coverage is measured over: the core library, the flows, the tasks and the CLI."""
WORKERS = re.compile(r"^ran on (\d+) parallel workers", re.M)
"""The line tests/conftest.py's terminal summary writes when the tests ran in parallel."""
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")


def durations(output: str) -> tuple[Counter, Counter]:
    """(seconds per module, seconds per test) from pytest's `--durations=0` lines, setup+call+teardown summed."""
    modules: Counter = Counter()
    tests: Counter = Counter()
    for line in output.splitlines():
        m = DURATION.match(line)
        if m:
            seconds, node = float(m.group(1)), m.group(3)
            modules[node.split("::")[0]] += seconds
            tests[node] += seconds
    return modules, tests


def workers(output: str) -> float:
    """How many pytest-xdist workers ran the tests (1 when the run was not parallel)."""
    found = WORKERS.search(output)
    return float(found.group(1)) if found else 1.0


def coverage_rc(data_file: Path, tree: Path) -> str:
    """A coverage.py configuration measuring PACKAGES of `tree` in this process and every Python subprocess."""
    sources = ", ".join(str(tree / p) for p in PACKAGES)
    return (f"[run]\nsource = {sources}\nparallel = true\ndata_file = {data_file}\n"
            "patch = subprocess\nsigterm = true\n"
            f"[report]\nshow_missing = false\nskip_empty = true\n")


def coverage_figures(report: dict, tree: Path) -> dict[str, float]:
    """Totals and per-package (statements, covered lines, percent) of `coverage json`'s report."""
    figures = {"lines_total": report["totals"]["num_statements"],
               "lines_covered": report["totals"]["covered_lines"],
               "line_coverage_pct": report["totals"]["percent_covered"]}
    per: dict[str, list[int]] = {p: [0, 0] for p in PACKAGES}
    for name, data in report["files"].items():
        package = Path(name).resolve().relative_to(tree).parts[0] if Path(name).is_absolute() else Path(name).parts[0]
        if package in per:
            per[package][0] += data["summary"]["num_statements"]
            per[package][1] += data["summary"]["covered_lines"]
    for package, (statements, covered) in per.items():
        figures |= {f"{package}/lines_total": statements, f"{package}/lines_covered": covered,
                    f"{package}/line_coverage_pct": 100.0 * covered / statements if statements else 0.0}
    return figures


def git_fields(tree: Path) -> dict:
    """The measured tree's revision and whether its tracked files differ from it (recorded over this checkout's)."""
    revision, dirty = git_state(tree)
    return {"git_revision": revision, "git_dirty": dirty, "tree": str(tree)}


def run_pytest(args: list[str], tree: Path, env: dict[str, str]) -> tuple[int, str]:
    """pytest in `tree` with this venv, its console passed through and kept."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    print("$ " + " ".join(shlex.quote(a) for a in command), flush=True)
    return run_teed(command, tree, env)


def tree_env(tree: Path) -> dict[str, str]:
    """The environment a run in `tree` gets: its sources ahead of the venv's editable install."""
    env = dict(os.environ)
    if tree != ROOT:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    return env


def report(figures: dict[str, float], tree: Path) -> None:
    """The figures printed, and kept in the results file when the run is recorded."""
    for key, value in figures.items():
        print(f"[figure] {key} = {value:.6g}")
    if current() is not None:
        current().report(figures, **git_fields(tree))


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat's first line ((0, 0) where it is missing)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The share of the machine's CPU time that was busy between two cpu_times() readings, in %:
    100 * Δbusy / Δtotal (every process counted, not only the tests: the machine should be quiet)."""
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0


def timing(tree: Path, extra: list[str]) -> int:
    sampler = ProcessSampler()
    sampler.start()
    start, cpu_start = time.perf_counter(), cpu_times()
    try:
        status, output = run_pytest(["--durations=0", *extra], tree, tree_env(tree))
    finally:
        sampler.stop()
    wall, cpu_busy = time.perf_counter() - start, busy_share(cpu_start, cpu_times())
    modules, tests = durations(output)
    figures = {"wall_s": wall, "wall_min": wall / 60, "exit_status": float(status), **pytest_figures(output),
               "workers": workers(output), "test_minutes_summed": sum(tests.values()) / 60,
               "cpu_busy_pct": cpu_busy}
    figures |= {f"module/{name}": s for name, s in modules.most_common()}
    figures |= {f"slowest/{name}": s for name, s in tests.most_common(10)}
    figures |= sampler.figures()
    report(figures, tree)
    return status


def coverage(tree: Path, extra: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="agentrl-cov-") as tmp:
        rc, data = Path(tmp) / "coveragerc", Path(tmp) / ".coverage"
        rc.write_text(coverage_rc(data, tree))
        env = tree_env(tree) | {"COVERAGE_RCFILE": str(rc)}
        start = time.perf_counter()
        status, output = run_pytest([f"--cov-config={rc}", *[f"--cov={tree / p}" for p in PACKAGES],
                                     "--cov-report=", *extra], tree, env)
        wall = time.perf_counter() - start
        subprocess.run([sys.executable, "-m", "coverage", "combine", "--append", "-q"], cwd=tree, env=env)
        subprocess.run([sys.executable, "-m", "coverage", "report", "--precision=1"], cwd=tree, env=env)
        out = Path(tmp) / "coverage.json"
        subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", str(out)], cwd=tree, env=env,
                       check=True)
        figures = coverage_figures(json.loads(out.read_text()), tree)
    figures |= {"wall_s": wall, "wall_min": wall / 60, "exit_status": float(status), **pytest_figures(output)}
    report(figures, tree)
    return status


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=["timing", "coverage", "both"], default="both")
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    p.add_argument("--record-suffix", default="", help="appended to the results' names (e.g. _before)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then extra pytest arguments")
    args = p.parse_args(argv)
    args.pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    args.tree = args.tree.resolve()
    return args


RECORDS = {"timing": "test_suite", "coverage": "test_coverage"}


def both(args: argparse.Namespace, record: bool) -> int:
    """Each part as its own recorded run of this script."""
    status = 0
    for part in ("timing", "coverage"):
        command = [sys.executable, __file__, "--part", part, "--tree", str(args.tree),
                   "--record-suffix", args.record_suffix, *([] if record else ["--no-record"]),
                   "--", *args.pytest_args]
        status = subprocess.run(command, cwd=ROOT).returncode or status
    return status


def main() -> int:
    args = parse(sys.argv[1:])
    return {"timing": timing, "coverage": coverage}[args.part](args.tree, args.pytest_args)


if __name__ == "__main__":
    rest, name, record = split_record_args(sys.argv[1:])
    options = parse(rest)
    if options.part == "both":
        sys.exit(both(options, record))
    if record and name is None:  # each part has its own results file
        sys.argv.insert(1, f"--record={RECORDS[options.part]}{options.record_suffix}")
    sys.exit(run_recorded("test_suite", main))
