"""The storage contract every backend shares: the `Storage` API, its error, keys and upload manifests.

`storage.py` (local folders, `open_storage`) and `storage_s3.py` (S3) both build on this module and
neither imports the other at module level, so the two backends stay free of an import cycle.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
import unicodedata
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from agentrl_core.errors import AgentRLError
from agentrl_core.system.fsync import fsync_dir

UPLOAD_MARKER = "_UPLOAD_COMPLETE.json"
"""Name of the manifest object written last by `put_dir`; a folder without it is incomplete."""


class StorageError(AgentRLError):
    """A storage operation failed: the message names the operation, the URI and the cause (never credentials)."""


MAX_KEY_BYTES = 1024
"""S3's limit on a key's UTF-8 length; local keys are held to it too, so a run moves between backends."""


def normalize_key(key: str) -> str:
    """A clean relative key (`a/b/c`): no leading/trailing slashes, no empty, `.` or `..` parts, no
    control character (a NUL would truncate a local path), at most MAX_KEY_BYTES long."""
    text = str(key)
    parts = [p for p in text.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise StorageError(f"invalid storage key {text[:200]!r}: use a relative path such as 'checkpoints/step_000010'")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in text):
        raise StorageError(f"invalid storage key {text[:200]!r}: it holds a control character")
    clean = "/".join(parts)
    if len(clean.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise StorageError(f"invalid storage key of {len(clean.encode('utf-8', 'surrogatepass'))} bytes: "
                           f"at most {MAX_KEY_BYTES}")
    return clean


def local_files(local_dir: Path) -> dict[str, Path]:
    """Every regular file under `local_dir`, by its relative POSIX path (sorted)."""
    if not local_dir.is_dir():
        raise StorageError(f"cannot upload {local_dir}: it is not a folder")
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(local_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            found[path.relative_to(local_dir).as_posix()] = path
    if UPLOAD_MARKER in found:
        raise StorageError(
            f"cannot upload {local_dir}: it already holds {UPLOAD_MARKER} (the storage marker); "
            "upload the original folder, not a copy of a stored one with its marker"
        )
    return found


def manifest_of(files: dict[str, Path]) -> dict[str, Any]:
    """The upload marker's content: `{"files": {relpath: size_bytes}, "uploaded_at": unix_time}`."""
    return {"files": {rel: path.stat().st_size for rel, path in files.items()}, "uploaded_at": time.time()}


def parse_manifest(text: str | bytes, where: str) -> dict[str, int]:
    """The `files` map of an upload marker, or StorageError when it is not one."""
    try:
        files = json.loads(text)["files"]
        return {str(rel): int(size) for rel, size in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StorageError(f"{where}: the upload marker is not a valid manifest ({type(exc).__name__})") from None


def temp_sibling(final: Path) -> Path:
    """A fresh hidden sibling `.<name>.tmp-<pid>-<hex>` (the pattern `atomic.cleanup_stale` removes)."""
    return final.parent / f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename the finished folder `tmp` to `final`; an existing `final` is moved aside, then deleted."""
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            os.replace(old, final)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(final.parent)


def check_download(tmp: Path, expected: dict[str, int], uri: str) -> None:
    """StorageError unless every manifest file is in `tmp` with its recorded size."""
    wrong = []
    for rel, size in expected.items():
        path = tmp / rel
        if not path.is_file():
            wrong.append(f"{rel} (missing)")
        elif path.stat().st_size != size:
            wrong.append(f"{rel} ({path.stat().st_size} bytes, manifest says {size})")
    if wrong:
        raise StorageError(f"download of {uri} is inconsistent with its manifest: {', '.join(wrong[:10])}")


class Storage(ABC):
    """One storage root (a local folder or an S3 prefix); keys are relative to it."""

    @abstractmethod
    def uri_for(self, key: str) -> str:
        """The full URI (a path, or s3://bucket/prefix/key) of `key`."""

    @abstractmethod
    def put_file(self, local_path: str | Path, key: str) -> str:
        """Store one file under `key`; return its URI."""

    @abstractmethod
    def get_file(self, uri_or_key: str, local_path: str | Path) -> Path:
        """Fetch one stored file to `local_path` (written to a temporary name, then renamed)."""

    @abstractmethod
    def put_dir(self, local_dir: str | Path, key: str) -> str:
        """Store every file of `local_dir` under `key`, the upload marker last; return the URI."""

    @abstractmethod
    def get_dir(self, uri_or_key: str, local_dir: str | Path) -> Path:
        """Fetch a folder stored by `put_dir` into `local_dir`; refuse one without the marker."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True when `key` is a stored file or a completely stored folder."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys of every stored file under `prefix` (sorted; markers included)."""
