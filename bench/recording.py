"""Results files of the benchmarks: each run's figures, raw console output, command, CPU, git revision and date.

Every benchmark (and `bench/record_command.py` for what is not one: the demo, the test suite) runs
its `main` through `run_recorded(name, main)`. The run's whole console output — its own prints, rich
tables, logging, and its subprocesses' output, since file descriptors 1 and 2 are teed — is kept,
and when the run ends well two files are written under `bench/results/`:

- `<record>.json`: `{"bench", "record", "command", "argv", "cpu", "machine", "git_revision",
  "git_dirty", "date", "wall_s", "allocator", "figures", ...}`, where `figures` are the numbers README.md
  and docs/ may quote (`bench/readme_figures.py` renders their tables from these files only, and checks
  their figures in running text against them; a file with `git_dirty: true` backs none: record at a commit);
- `<record>.txt`: the raw console output, headed by the command line.

`<record>` defaults to the benchmark's name plus its arguments (`rollout`, `speed__steps-5`);
`--record NAME` names it, `--no-record` writes nothing (both are taken out of argv before the
benchmark parses it). A run that fails writes nothing, whatever figures it reported before failing: one
that raises, or ends with a non-zero exit status (its `main` returns a non-zero int or raises `SystemExit`
with a non-zero code), so a results file is always a complete, successful run. A failure that is itself the
figure (a test suite with failures) is recorded only where that is explicit: `bench/record_command.py
--allow-failure` reports the command's status as the figure `exit_status` and its own `main` returns 0.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
SHOWN_ENV = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "AGENTRL_SYSTEM_MALLOC", "AGENTRL_FUZZ_EXAMPLES")
"""Environment variables that change what a benchmark measures: shown in front of its recorded command."""


class Recording:
    """The figures and extra fields a benchmark reports while it runs (`report`), written when it ends."""

    def __init__(self) -> None:
        self.figures: dict[str, float] = {}
        self.extra: dict[str, Any] = {}

    def report(self, figures: dict[str, float], **extra: Any) -> None:
        """Add figures (name -> number) and JSON-serialisable extra fields to this run's results."""
        self.figures.update({k: float(v) for k, v in figures.items()})
        self.extra.update(extra)


_active: Recording | None = None


def current() -> Recording | None:
    """The recording of the benchmark running in this process (None outside `run_recorded`)."""
    return _active


class FdTee:
    """Copies everything written to file descriptors 1 and 2 (this process and its children) into a buffer,
    while still passing it through to the original stdout and stderr."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            self._saved[fd] = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(target=self._pump, args=(read_end, self._saved[fd]), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, read_end: int, original: int) -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                os.write(original, chunk)
                with self._lock:
                    self._buf += chunk

    def stop(self) -> str:
        """Restore stdout/stderr and return what was written (children still holding the pipe are not waited
        for beyond a few seconds)."""
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipe's last write end in this process closes: its pump sees EOF
        for thread in self._threads:
            thread.join(timeout=5)
        for saved in self._saved.values():
            os.close(saved)
        with self._lock:
            return self._buf.decode("utf-8", errors="replace")


def split_record_args(argv: list[str]) -> tuple[list[str], str | None, bool]:
    """(argv without --record NAME / --no-record, the NAME given or None, whether to record); nothing after a
    bare "--" is looked at (it is a command's own arguments)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    rest, name, record = [], None, True
    it = iter(argv[:cut])
    for arg in it:
        if arg == "--no-record":
            record = False
        elif arg == "--record":
            name = next(it, None)
        elif arg.startswith("--record="):
            name = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return rest + argv[cut:], name, record


def default_record_name(bench: str, args: list[str]) -> str:
    """`bench` plus a slug of its arguments: "rollout", "speed__compute-dtype-bfloat16" (at most 100 chars)."""
    slug = re.sub(r"[^A-Za-z0-9.=]+", "-", " ".join(a.lstrip("-") for a in args)).strip("-")
    name = f"{bench}__{slug}" if slug else bench
    return name[:100].rstrip("-")


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,120}", name):
        raise SystemExit(f"--record {name!r}: use one file name of letters, digits, '.', '_', '=', '-'")
    return name


def command_line(argv: list[str]) -> str:
    """The command as a user types it in the repository root: shown env variables, the venv's python, the
    script path relative to the root, the arguments."""
    python = Path(sys.executable)
    try:
        python_shown = str(python.relative_to(ROOT))
    except ValueError:
        python_shown = "python"
    script = Path(argv[0]).resolve()
    try:
        script_shown = str(script.relative_to(ROOT))
    except ValueError:
        script_shown = argv[0]
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in SHOWN_ENV if k in os.environ]
    return " ".join([*env, python_shown, script_shown, *(shlex.quote(a) for a in argv[1:])])


RESULTS_PATHSPEC = f":(exclude){RESULTS_DIR.relative_to(ROOT).as_posix()}"
"""Left out of the dirty check: results files are what benches write, not what they run, so a run recorded after
another in the same checkout (a sequence of re-recordings at one commit) is still recorded at that commit."""


def git_state(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files other than results differ from it) of the checkout at `root`;
    (None, None) outside one."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 RESULTS_PATHSPEC], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return rev.stdout.strip(), bool(status.stdout.strip())


def allocator_in_force() -> str:
    """"tuned" when the tuned glibc malloc settings were in force at this process's start, else "system"."""
    from agentrl_core.system import malloc_tuning

    return "tuned" if malloc_tuning.in_force() else "system"


def write_results(path_stem: Path, payload: dict[str, Any], console: str) -> None:
    """`<stem>.json` and `<stem>.txt`, each written whole or not at all."""
    from agentrl_core.system.atomic_file import write_text_atomic

    write_text_atomic(path_stem.with_suffix(".json"), json.dumps(payload, indent=2) + "\n")
    write_text_atomic(path_stem.with_suffix(".txt"), f"$ {payload['command']}\n{console}")


def exit_status(code: Any) -> int:
    """The exit status a `main`'s return value or a `SystemExit` code gives the process: None -> 0, an int as it
    is, anything else (a message, as `sys.exit("why")` gives) -> 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_recorded(bench: str, main: Callable[[], Any], results_dir: Path | None = None) -> Any:
    """Run a benchmark's `main` with its console teed; when it ends with exit status 0, write its results files
    (module docstring); a non-zero status (returned, or a `SystemExit` raised) records nothing."""
    global _active
    original_argv = list(sys.argv)
    rest, name, record = split_record_args(sys.argv[1:])
    sys.argv = [sys.argv[0], *rest]
    if not record:
        return main()
    record_name = _check_name(name or default_record_name(bench, rest))
    command = command_line(original_argv)  # --record NAME kept: the command writes the same file again
    allocator = allocator_in_force()
    _active, tee, start = Recording(), FdTee(), time.perf_counter()
    tee.start()
    exiting: SystemExit | None = None
    try:
        result = main()
    except SystemExit as exc:  # sys.exit(...) inside main: its code is the run's status
        result, exiting = exc.code, exc
    except BaseException:
        tee.stop()
        raise
    finally:
        recording, _active = _active, None
    console = tee.stop()
    if (status := exit_status(result)) != 0:
        print(f"[bench] {bench} ended with exit status {status}: nothing recorded (a failed run records nothing"
              f"{', though it reported figures' if recording.figures else ''})", file=sys.stderr)
    elif exiting is not None and not recording.figures:
        pass  # exited 0 before measuring anything (--help): nothing ran, so nothing to record and no error
    else:
        _record(bench, record_name, command, rest, time.perf_counter() - start, allocator, recording, console,
                results_dir)
    if exiting is not None:
        raise exiting
    return result


def _record(bench: str, record_name: str, command: str, argv: list[str], wall: float, allocator: str,
            recording: Recording, console: str, results_dir: Path | None) -> None:
    """Write a successful run's results files; a run that reported no figures is an error (nothing to quote)."""
    if not recording.figures:
        raise RuntimeError(f"benchmark {bench} reported no figures: nothing to record")
    write_results((results_dir or RESULTS_DIR) / record_name,
                  _payload(bench, record_name, command, argv, wall, allocator, recording), console)
    print(f"[bench] results: {(results_dir or RESULTS_DIR).relative_to(ROOT) if results_dir is None else results_dir}"
          f"/{record_name}.json (+ .txt)")


def _payload(bench: str, record: str, command: str, argv: list[str], wall: float, allocator: str,
             recording: Recording) -> dict[str, Any]:
    from agentrl_core.system.machine_info import cpu_info

    info = cpu_info()
    revision, dirty = git_state()
    return {"bench": bench, "record": record, "command": command, "argv": argv, "cpu": "CPU: " + info.describe(),
            "machine": info.to_dict(), "git_revision": revision, "git_dirty": dirty,
            "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            "wall_s": round(wall, 2), "allocator": allocator, "figures": recording.figures, **recording.extra}
