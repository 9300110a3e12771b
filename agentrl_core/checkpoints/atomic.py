"""Atomic folder writes: build under a hidden temporary name, mark complete last, rename into place.

A folder published here is either absent or complete: readers look for the marker file, and the
only operation that makes a final name appear is one `os.replace` of a folder that already holds it.
Temporary names are `.<final>.tmp-<pid>-<hex>` (being written) and `.<final>.old-<pid>-<hex>` (a
complete folder moved aside while its replacement is renamed in). `cleanup_stale` removes the ones a
crashed process left behind, and puts an `.old` folder back when its replacement never arrived.
One writer per parent folder is assumed (rank 0 saves); the pid check protects other live
processes on the same host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from agentrl_core.system.diskfull import raising_disk_full
from agentrl_core.system.fsync import fsync_dir, fsync_file

logger = logging.getLogger(__name__)

MARKER = "COMPLETE"
"""Name of the marker file, written last inside every complete folder."""

_STALE_NAME = re.compile(r"^\.(?P<final>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")
# Temporary folders this process is writing right now: never stale, even though the pid is ours.
_ACTIVE: set[Path] = set()


def is_complete(path: Path) -> bool:
    """True when `path` is a folder holding the completion marker."""
    return (path / MARKER).is_file()


def fsync_tree(root: Path) -> None:
    """Flush every file and folder under `root` (the folder itself included)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fsync_file(Path(dirpath) / name)
        fsync_dir(Path(dirpath))


def write_marker(folder: Path, info: dict) -> None:
    """Write the completion marker (JSON: `info` + time) and flush it; call it LAST."""
    payload = json.dumps({**info, "completed_at": time.time()}, indent=1)
    marker = folder / MARKER
    with open(marker, "w", encoding="utf-8") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(folder)


def _sibling(final: Path, kind: str) -> Path:
    return final.parent / f".{final.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def publish(tmp: Path, final: Path) -> None:
    """Rename the complete folder `tmp` to `final`, replacing an existing `final` safely.

    Order: move the old folder aside (`.old-` name), rename the new one in, delete the old one.
    A crash between the two renames leaves no `final` and a complete `.old-` folder, which
    `cleanup_stale` restores; on an ordinary exception the old folder is put back at once.
    """
    if not is_complete(tmp):
        raise RuntimeError(f"refusing to publish {tmp}: it has no {MARKER} marker")
    if not final.exists():
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return
    old = _sibling(final, "old")
    _ACTIVE.add(old)
    try:
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            if old.exists() and not final.exists():
                os.replace(old, final)
            raise
        fsync_dir(final.parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        _ACTIVE.discard(old)


@contextlib.contextmanager
def atomic_dir(final: Path, info: dict | None = None) -> Iterator[Path]:
    """Yield a fresh temporary sibling of `final`; on clean exit flush it, mark it, publish it.

    On any exception the temporary folder is deleted and `final` is left as it was; a full disk
    (ENOSPC, EDQUOT, or torch.save's errno-less short write) becomes one DiskFullError naming `final`.
    """
    tmp = _sibling(final, "tmp")
    _ACTIVE.add(tmp)
    try:
        # The partial folder goes before the error is built, so it reports the space the user really has.
        with raising_disk_full(final, cleanup=lambda: _discard(tmp)):
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            yield tmp
            fsync_tree(tmp)
            write_marker(tmp, info or {})
            publish(tmp, final)
    finally:
        _ACTIVE.discard(tmp)
        _discard(tmp)


def _discard(tmp: Path) -> None:
    if tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True)


def remove_dir(path: Path) -> None:
    """Delete a published folder without ever leaving it half-deleted under its own name."""
    doomed = _sibling(path, "old")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _is_stale(path: Path, pid: int) -> bool:
    if path in _ACTIVE:
        return False
    # Our own pid but not in _ACTIVE: left by an earlier process that had the same pid (containers).
    return pid == os.getpid() or not _pid_alive(pid)


def cleanup_stale(parent: Path) -> list[Path]:
    """Remove temporary folders left by crashed writers in `parent`; return what was removed.

    Only names matching the temporary pattern are touched. An `.old-` folder that is complete
    and whose final name is missing (a crash mid-replace) is renamed back instead of deleted.
    """
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for entry in sorted(parent.iterdir()):
        match = _STALE_NAME.match(entry.name)
        if match is None or not entry.is_dir() or not _is_stale(entry, int(match["pid"])):
            continue
        final = parent / match["final"]
        if match["kind"] == "old" and is_complete(entry) and not final.exists():
            logger.warning("restoring %s from %s (a previous save crashed mid-replace)", final, entry.name)
            os.replace(entry, final)
            continue
        logger.warning("removing leftover temporary folder %s (from a crashed writer)", entry)
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed
