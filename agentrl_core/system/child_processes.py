"""Child processes of a run: out of the terminal's signals, dying with their parent, killable at once.

A terminal's Ctrl-C (and `timeout`, `docker stop`, systemd's stop) signals the whole foreground
process group. Servers a run starts (Prefect's API server, the env server, the experience pool,
model servers) must outlive that signal long enough for the run to record its state, so they are
started in their own session (`CHILD_SESSION`). They must still never outlive the run: each one
watches its parent (`watch_parent`: the parent's exit, SIGKILL included, re-parents the child, which
it notices within a second; on Linux `set_parent_death_signal` makes the kernel signal it at once).
`track` records them so that a second Ctrl-C can kill them all before exiting (`kill_tracked`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable

log = logging.getLogger(__name__)

CHILD_SESSION: dict[str, Any] = {"start_new_session": True} if os.name == "posix" else {}
"""subprocess.Popen arguments that put a child in its own session (and process group)."""
PR_SET_PDEATHSIG = 1

_tracked: "weakref.WeakSet[Any]" = weakref.WeakSet()
_lock = threading.RLock()  # re-entrant: kill_tracked may run in a signal handler that interrupted track()


def track(proc: Any) -> Any:
    """Remember a child (a subprocess.Popen) so `kill_tracked` can end it; returns it."""
    with _lock:
        _tracked.add(proc)
    return proc


def tracked_pids() -> list[int]:
    """Pids of the tracked children still running."""
    with _lock:
        return [p.pid for p in list(_tracked) if p.poll() is None]


def kill_tracked(sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to every tracked child still running — to its whole process group when it leads one
    (its own workers included); returns their pids. Safe to call from a signal handler."""
    killed = []
    for pid in tracked_pids():
        try:
            if os.name == "posix" and os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def set_parent_death_signal(parent_pid: int, sig: int = signal.SIGTERM) -> bool:
    """Linux: have the kernel send `sig` to this process when its parent exits (PR_SET_PDEATHSIG).

    The kernel ties this to the thread that forked us, so only a child started from its parent's
    main thread should rely on it alone (`watch_parent` covers the rest). If `parent_pid` is already
    gone (it died before the call), `sig` is sent at once. False where prctl is not available.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return True


def watch_parent(parent_pid: int, on_gone: Callable[[], None] | None = None, period_s: float = 0.5) -> threading.Thread:
    """A daemon thread that runs `on_gone` (default: SIGTERM to this process, a graceful stop) once
    the process `parent_pid` is no longer our parent, i.e. it exited, however it ended."""

    def gone() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        log.warning("parent process %d is gone: stopping", parent_pid)
        (on_gone or gone)()

    thread = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    thread.start()
    return thread
