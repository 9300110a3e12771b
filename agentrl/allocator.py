"""glibc malloc settings for training: keep freed tensor buffers instead of returning them to the OS.

By default glibc serves large buffers with mmap and unmaps them on free, so every step faults
the same memory back in (REFERENCE.md §1: about a quarter of CPU time in a GRPO step). With
mmap off and trimming off, freed buffers are reused: measured here, a bf16 GRPO step went from
30.0 s to 22.7 s (bench/bench_speed.py) for 7 % more peak RSS. glibc reads these variables only
at process start, so the CLI re-executes itself once with them set.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000", "MALLOC_TOP_PAD_": "1073741824"}
OPT_OUT = "AGENTRL_SYSTEM_MALLOC"


def wants_reexec(environ: dict[str, str]) -> bool:
    """True when the tuned settings are not in force and the user has not opted out."""
    return environ.get(OPT_OUT) != "1" and any(k not in environ for k in TUNED)


def reexec_with_tuned_malloc(argv: Sequence[str], entry: Sequence[str] = ("-m", "agentrl.cli")) -> None:
    """Replace this process by the same command (`python <entry> <argv>`) with the tuned malloc
    settings; returns if they are already in force, opted out, or not on Linux."""
    if not wants_reexec(dict(os.environ)) or not sys.platform.startswith("linux"):
        return
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in TUNED.items()}}
    os.execve(sys.executable, [sys.executable, *entry, *argv], env)


def reexec_script_with_tuned_malloc() -> None:
    """The same for a script run as `python path/to/script.py ...` (the benchmarks: they measure what
    `agentrl run` does, allocator included)."""
    reexec_with_tuned_malloc(sys.argv[1:], entry=(os.path.abspath(sys.argv[0]),))
