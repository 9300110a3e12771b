"""The CLI's tuned malloc: `agentrl run`/`eval` (and the benchmarks) re-execute themselves once with it.

What the settings are and why they apply to the training process only: agentrl_core.system.malloc_tuning.
glibc reads them only at process start, hence the re-exec; the re-executed process then removes
them from its environment (`adopt`), so the Prefect server, env servers and their workers, the
experience pool and a model server it starts use glibc's default and hand memory back to the OS.
What it buys, in step time and peak memory: `.venv/bin/python bench/bench_allocator.py` (a row of the main table in docs/performance.md).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from agentrl_core.system.malloc_tuning import OPT_OUT, TUNED, adopt, in_force

__all__ = ["OPT_OUT", "TUNED", "in_force", "reexec_script_with_tuned_malloc", "reexec_with_tuned_malloc",
           "wants_reexec"]


def wants_reexec(environ: dict[str, str]) -> bool:
    """True when the tuned settings are not in force and the user has not opted out."""
    return environ.get(OPT_OUT) != "1" and not in_force() and any(k not in environ for k in TUNED)


def reexec_with_tuned_malloc(argv: Sequence[str], entry: Sequence[str] = ("-m", "agentrl.cli")) -> None:
    """Replace this process by the same command (`python <entry> <argv>`) with the tuned malloc settings;
    returns if they are already in force (then they are taken out of the environment that children
    inherit), opted out, or not on Linux."""
    if adopt() or not wants_reexec(dict(os.environ)) or not sys.platform.startswith("linux"):
        return
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in TUNED.items()}}
    os.execve(sys.executable, [sys.executable, *entry, *argv], env)


def reexec_script_with_tuned_malloc() -> None:
    """The same for a script run as `python path/to/script.py ...` (the benchmarks: they measure what
    `agentrl run` does, allocator included)."""
    reexec_with_tuned_malloc(sys.argv[1:], entry=(os.path.abspath(sys.argv[0]),))
