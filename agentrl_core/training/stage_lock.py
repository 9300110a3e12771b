"""One writer per stage directory.

Two runs that write the same stage directory (the same `run.root`/`run.name` launched twice, a Prefect run
started again while the first still trains, a script run twice by mistake) interleave their metrics, overwrite
each other's demos and checkpoints, and each resumes from the other's steps: both runs are lost. A stage
therefore holds an exclusive, non-blocking `flock` on `<stage_dir>/.writer.lock` while it trains, with the
holder's PID and start time written in it; a second writer gets StageBusyError naming that holder at once,
before it writes anything. The kernel drops the lock when its process ends, however it ends (a crash, the OOM
killer, SIGKILL), so no stale lock is ever left behind and a crashed run resumes with the same command.

The lock is advisory and per machine: a filesystem without `flock` (some network mounts) refuses it with
ENOLCK/EOPNOTSUPP, and the stage then goes on unguarded with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from agentrl_core.errors import AgentRLError

log = logging.getLogger(__name__)

LOCK_NAME = ".writer.lock"
UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}
"""errno of a filesystem that has no flock: the stage goes on unguarded."""


class StageBusyError(AgentRLError):
    """Another process (or another stage of this one) is writing the same stage directory."""


@contextmanager
def stage_writer(stage_dir: Path) -> Iterator[None]:
    """Hold `stage_dir`'s writer lock for the block; StageBusyError if another writer holds it."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    path = stage_dir / LOCK_NAME
    with open(path, "a+") as handle:
        if _try_lock(handle, stage_dir):
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            handle.flush()
        yield  # the lock goes with the file's close (or the process's end)


def _try_lock(handle, stage_dir: Path) -> bool:
    """True once held; False on a filesystem without flock (warned); StageBusyError when another holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "a process that wrote no PID"
        raise StageBusyError(
            f"{stage_dir} is being written by another run ({holder}): two writers would mix its checkpoints and "
            "metrics. Wait for that run to end (it keeps the lock until its process exits), or give this one "
            "another run.name or run.root") from None
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
        log.warning("%s: this filesystem has no flock (%s); the stage is not guarded against a second writer",
                    stage_dir, exc.strerror)
        return False
