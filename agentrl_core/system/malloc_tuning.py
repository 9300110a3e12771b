"""glibc malloc tuned for the training process only: set at its start, then kept out of its children.

By default glibc serves large buffers with mmap and unmaps them on free, so every training step faults
the same memory back in (page faults are a large share of a CPU GRPO step's time; what the tuning buys
is measured by bench/bench_allocator.py). With mmap off and trimming off, freed tensor buffers are
reused instead, but that memory is then never handed back to the OS. That pays in the process that
trains, and only there: a Prefect server, an env server and its workers, an experience pool or a model
server would hold their peak forever.

glibc reads these variables once, when a process starts. So a process that should be tuned is
started with them (the CLI re-executes itself, `agentrl.allocator`; the Ray trainer actor gets them
through its own runtime env, `actor_options`), and right after its start `adopt` removes them from
its environment: glibc keeps the settings it read, and no child process inherits them.
`AGENTRL_SYSTEM_MALLOC=1` keeps glibc's defaults everywhere.
"""

from __future__ import annotations

import os
from typing import Any, MutableMapping

TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000", "MALLOC_TOP_PAD_": "1073741824"}
"""mmap off (large buffers come from the heap), trim off (freed heap memory is kept), a 1 GiB top pad."""
OPT_OUT = "AGENTRL_SYSTEM_MALLOC"
"""Set to 1: glibc's default allocator everywhere (no re-exec, no tuned trainer actor)."""
APPLIED_ENV = "AGENTRL_MALLOC_APPLIED"
"""Set by `adopt` to the pid of the process it tuned: children inherit the variable, not the tuning, so a
reader compares it with its own pid (`in_force`)."""
_adopted: dict[str, str] = {}


def opted_out(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether the user asked for glibc's default allocator (AGENTRL_SYSTEM_MALLOC=1)."""
    return (os.environ if environ is None else environ).get(OPT_OUT) == "1"


def adopt(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """In a process started with the tuned settings: remember them and remove them from `environ` (this
    process's environment), so every child starts with glibc's default. Returns what this process runs
    with ({} when it was not started tuned, or the user opted out: then nothing is touched)."""
    environ = os.environ if environ is None else environ
    if opted_out(environ) or not all(k in environ for k in TUNED):
        return dict(_adopted)
    _adopted.update({k: environ.pop(k) for k in TUNED})
    environ[APPLIED_ENV] = str(os.getpid())
    return dict(_adopted)


def in_force() -> dict[str, str]:
    """The tuned settings this process started with ({} if none): adopted, or still in its environment."""
    if _adopted:
        return dict(_adopted)
    return {k: os.environ[k] for k in TUNED} if all(k in os.environ for k in TUNED) else {}


def actor_options(options: dict[str, Any]) -> dict[str, Any]:
    """Ray actor `options` plus the tuned settings in the actor's own runtime env (Ray merges its env_vars
    with the job's), unless the user opted out. Ray starts the actor's process with them, so glibc reads
    them; the actor then calls `adopt`."""
    if opted_out():
        return options
    runtime_env = dict(options.get("runtime_env") or {})
    runtime_env["env_vars"] = {**TUNED, **(runtime_env.get("env_vars") or {})}
    return {**options, "runtime_env": runtime_env}


def release_free_heap() -> bool:
    """Hand the heap's free pages back to the OS (glibc's `malloc_trim(0)`, which also releases free chunks
    in the middle of the heap). With trimming off (TUNED) a process keeps every byte it ever freed, so the
    memory it measures as resident at the start of a stage would include the buffers an earlier stage freed
    (an SFT stage, another arm of a benchmark), and the stage would plan as if they were still in use. True
    when glibc released memory; False when it had none to release or the C library is not glibc."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    return bool(trim(0))


def describe() -> str:
    """One line for the start of a run: what this process and its children allocate with."""
    if in_force():
        return (f"glibc malloc tuned for this training process (mmap and trim off); its servers and workers use "
                f"glibc's default ({OPT_OUT}=1: the default here too)")
    return "glibc's default malloc" + (f" ({OPT_OUT}=1)" if opted_out() else "")
