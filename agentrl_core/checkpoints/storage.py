"""Object storage for run artifacts (checkpoints, datasets, reports): a local folder or an S3 prefix.

Every backend has the same API, addressed by keys (`checkpoints/step_000010`, `reports/eval.json`)
relative to its root, or by the full URI that `uri_for(key)` returns:

- `put_dir(local_dir, key)` uploads every file, then an upload marker (`UPLOAD_MARKER`, a JSON
  manifest of relative paths and sizes) LAST, so a reader never takes a half-uploaded folder;
- `get_dir(uri, local_dir)` refuses a folder without the marker, downloads into a temporary
  sibling of `local_dir`, checks every manifest file arrived with its size, and renames it in;
- `put_file`, `get_file`, `exists`, `list(prefix)`, `uri_for(key)`.

`open_storage(None or a path, root=...)` gives a `LocalStorage`; `open_storage("s3://bucket/prefix")`
an `S3Storage` (boto3, imported lazily; see `storage_s3`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from agentrl_core.system.atomic_file import atomic_file
from agentrl_core.checkpoints.atomic import MARKER as ATOMIC_MARKER
from agentrl_core.checkpoints.storage_base import (
    UPLOAD_MARKER,
    Storage,
    StorageError,
    check_download,
    local_files,
    manifest_of,
    normalize_key,
    parse_manifest,
    replace_dir,
    temp_sibling,
)
from agentrl_core.system.diskfull import raising_disk_full

__all__ = ["UPLOAD_MARKER", "LocalStorage", "Storage", "StorageError", "normalize_key", "open_storage",
           "storage_from_config"]


class LocalStorage(Storage):
    """A folder on this machine (the run folder by default); URIs are absolute paths."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def _path(self, uri_or_key: str | Path) -> Path:
        text = str(uri_or_key)
        if text.startswith("file://"):
            text = text[len("file://"):]
        if os.path.isabs(text):
            return Path(text)
        return self.root / normalize_key(text)

    def uri_for(self, key: str) -> str:
        return str(self.root / normalize_key(key))

    def put_file(self, local_path: str | Path, key: str) -> str:
        src, dest = Path(local_path), self._path(key)
        if not src.is_file():
            raise StorageError(f"cannot store {src}: it is not a file")
        if src.resolve() != dest.resolve():
            _copy_file_atomic(src, dest)
        return str(dest)

    def get_file(self, uri_or_key: str, local_path: str | Path) -> Path:
        src, dest = self._path(uri_or_key), Path(local_path)
        if not src.is_file():
            raise StorageError(f"cannot fetch {src}: no such file in {self!r}")
        if src.resolve() != dest.resolve():
            _copy_file_atomic(src, dest)
        return dest

    def put_dir(self, local_dir: str | Path, key: str) -> str:
        src, dest = Path(local_dir), self._path(key)
        if src.resolve() == dest.resolve():  # already in place (e.g. a checkpoint of this run)
            if not self._complete(dest):
                raise StorageError(f"{dest} is already at its storage key but is not complete (no marker)")
            return str(dest)
        files = local_files(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_sibling(dest)
        try:
            with raising_disk_full(dest, cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True)):
                for rel, path in files.items():
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, tmp / rel)
                (tmp / UPLOAD_MARKER).write_text(json.dumps(manifest_of(files)), encoding="utf-8")
                replace_dir(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return str(dest)

    def get_dir(self, uri_or_key: str, local_dir: str | Path) -> Path:
        src, dest = self._path(uri_or_key), Path(local_dir)
        if not self._complete(src):
            raise StorageError(
                f"refusing {src}: it has no {UPLOAD_MARKER} (or {ATOMIC_MARKER}) marker, so its upload is "
                "incomplete or still running; re-run put_dir"
            )
        if src.resolve() == dest.resolve():
            return dest
        expected = self._manifest(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_sibling(dest)
        try:
            with raising_disk_full(dest, cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True)):
                for rel in expected:
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / rel, tmp / rel)
                tmp.mkdir(parents=True, exist_ok=True)
                check_download(tmp, expected, str(src))
                replace_dir(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def _complete(self, folder: Path) -> bool:
        return (folder / UPLOAD_MARKER).is_file() or (folder / ATOMIC_MARKER).is_file()

    def _manifest(self, folder: Path) -> dict[str, int]:
        """The marker's manifest, or (a folder published by `atomic_dir`) every file it holds."""
        marker = folder / UPLOAD_MARKER
        if marker.is_file():
            return parse_manifest(marker.read_bytes(), str(folder))
        return {rel: path.stat().st_size for rel, path in local_files(folder).items()}

    def exists(self, key: str) -> bool:
        path = self._path(key)
        return path.is_file() or (path.is_dir() and self._complete(path))

    def list(self, prefix: str = "") -> list[str]:
        base = self._path(prefix) if prefix.strip("/") else self.root
        if base.is_file():
            return [base.relative_to(self.root).as_posix()]
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())


def _copy_file_atomic(src: Path, dest: Path) -> None:
    """Copy to a temporary sibling, then rename over `dest` (a reader sees the old or the new file)."""
    with atomic_file(dest) as tmp:
        shutil.copy2(src, tmp)


def open_storage(
    uri: str | Path | None,
    *,
    root: str | Path,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    profile_name: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
) -> Storage:
    """The storage for `uri`: None → `LocalStorage(root)`; a path or file:// URI → `LocalStorage(path)`;
    `s3://bucket/prefix` → `S3Storage` through boto3.

    S3 credentials and endpoint come from the usual AWS settings (AWS_ACCESS_KEY_ID/
    AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws, and AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 for
    MinIO or moto) unless given here, e.g. from a Prefect AwsCredentials block. They are held by
    the boto3 client only, never in repr, logs or error messages.
    """
    if uri is None:
        return LocalStorage(root)
    text = str(uri)
    if text.startswith("s3://"):
        from agentrl_core.checkpoints.storage_s3 import S3Storage

        return S3Storage.from_uri(
            text, endpoint_url=endpoint_url, region_name=region_name, profile_name=profile_name,
            aws_access_key_id=aws_access_key_id, aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
        )
    if "://" in text and not text.startswith("file://"):
        raise StorageError(f"unsupported storage URI {text!r}: use a local path, file://path or s3://bucket/prefix")
    return LocalStorage(text[len("file://"):] if text.startswith("file://") else text)


def storage_from_config(store: Any, *, root: str | Path, **credentials: str | None) -> Storage:
    """`open_storage` for a `StoreConfig` (`storage`, `s3_endpoint_url`, `s3_region`); credentials
    (aws_access_key_id, aws_secret_access_key, aws_session_token, profile_name) are passed by the
    caller (e.g. from a Prefect block), never read from the config."""
    from agentrl_core.secrets import reveal

    endpoint = reveal(store.s3_endpoint_url, "store.s3_endpoint_url")
    return open_storage(store.storage, root=root, endpoint_url=endpoint, region_name=store.s3_region, **credentials)
