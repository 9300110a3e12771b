"""Disk full: recognise a write that failed for lack of space and raise one DiskFullError naming the path.

Libraries report a full disk in different ways: Python as `OSError` with errno ENOSPC (or EDQUOT
for a quota), safetensors as `SafetensorError("... No space left on device (os error 28)")`,
SQLite as "database or disk is full", and `torch.save` as a bare `RuntimeError("... unexpected
pos 576 vs 534")` or "PytorchStreamWriter failed writing file" that hides the ENOSPC behind it.
The last kind is called a full disk only when the filesystem is (nearly) full when it is caught.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from agentrl_core.errors import DiskFullError

NO_SPACE_ERRNOS = frozenset(code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None)
_SAYS_FULL = ("no space left on device", "disk quota exceeded", "database or disk is full", "storagefull")
# torch's zip writer loses the errno: these say only that a write came up short.
_SHORT_WRITE = ("unexpected pos", "pytorchstreamwriter failed", "file write failed")
LOW_SPACE_BYTES = 64 * 2**20
"""Below this much free space a short write with no errno (torch.save) is taken to be a full disk."""
_CHAIN_DEPTH = 10


def _existing(path: Path) -> Path:
    """`path` or its nearest existing ancestor (a failed write may not have created it)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: str | Path) -> str:
    """The mount point of the filesystem holding `path` (or would hold it)."""
    current = _existing(Path(path))
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return str(current)


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s filesystem; None where the OS cannot say."""
    try:
        stats = os.statvfs(_existing(Path(path)))
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    return stats.f_bavail * stats.f_frsize


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from or during (bounded: chains can loop)."""
    for _ in range(_CHAIN_DEPTH):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def _says_full(exc: BaseException) -> bool:
    if isinstance(exc, DiskFullError):
        return True
    if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _SAYS_FULL)


def is_disk_full(exc: BaseException, path: str | Path | None = None) -> bool:
    """Whether `exc` (or one it came from) is a write that failed for lack of space.

    A short write with no errno (torch.save's "unexpected pos") counts when `path`'s filesystem
    has less than LOW_SPACE_BYTES free now, so call this before removing the partial file.
    """
    for link in _chain(exc):
        if _says_full(link):
            return True
    if path is None:
        return False
    text = " ".join(str(link).lower() for link in _chain(exc))
    if not any(marker in text for marker in _SHORT_WRITE):
        return False
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE_BYTES


def disk_full_error(path: str | Path) -> DiskFullError:
    """A DiskFullError for `path` with the free space and mount point measured now."""
    return DiskFullError(str(path), free_bytes(path), mount_point(path))


@contextlib.contextmanager
def raising_disk_full(path: str | Path, *, cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """Turn a full-disk failure inside the block into one DiskFullError naming `path` (from the original).

    `cleanup` (e.g. delete the partial file) runs first, so the free space reported is what the
    user has once the half-written output is gone. Other errors pass through unchanged.
    """
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:
        if not is_disk_full(exc, path):
            raise
        if cleanup is not None:
            cleanup()
        raise disk_full_error(path) from exc
