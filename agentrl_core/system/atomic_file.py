"""Atomic file writes: write a temporary sibling, rename it over the target, delete it on any failure.

A reader sees the old file or the new one, never half of one, and a failed write (a full disk
above all) leaves no temporary file behind; a full disk raises DiskFullError naming the target.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from agentrl_core.system.diskfull import raising_disk_full


def temp_name(path: Path) -> Path:
    """A fresh hidden sibling `.<name>.tmp-<pid>-<hex>` of `path`."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write `path`'s new content to; on a clean exit it replaces `path`."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with raising_disk_full(path, cleanup=lambda: _discard(tmp)):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, path)
    finally:
        _discard(tmp)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns `path`."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
