"""S3 storage (boto3, imported lazily): the `Storage` API over `s3://bucket/prefix`.

Endpoint and credentials follow the usual AWS settings unless given explicitly: environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3), ~/.aws/config and credentials, instance roles. Multipart
uploads of large files are boto3's `upload_file`. Errors become `StorageError` with the operation,
the URI and the service's error code; credentials are never part of a message or the repr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

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

_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_MISSING = {"404", "NoSuchKey", "NotFound"}


def redact_url(url: str | None) -> str | None:
    """`url` without a `user:password@` part (an endpoint may carry one)."""
    return None if url is None else _URL_USERINFO.sub(r"\g<scheme>***@", url)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` → ("bucket", "a/b"); the key part may be empty."""
    if not uri.startswith("s3://"):
        raise StorageError(f"not an S3 URI: {uri!r} (expected s3://bucket/prefix)")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
        raise StorageError(f"invalid S3 bucket name {bucket!r} in {uri!r}: 3-63 lowercase letters, digits, '.', '-'")
    return bucket, key.strip("/")


def make_s3_client(**settings: Any) -> tuple[Any, Callable[[str], str]]:
    """A boto3 S3 client and a function that removes its secrets from a text.

    `settings`: endpoint_url, region_name, profile_name, aws_access_key_id, aws_secret_access_key,
    aws_session_token (None = boto3's usual lookup).
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise StorageError("s3:// storage needs boto3: pip install 'boto3>=1.34'") from None
    endpoint_url = settings.pop("endpoint_url", None)
    session = boto3.session.Session(**{k: v for k, v in settings.items() if v is not None})
    retries = Config(retries={"max_attempts": 5, "mode": "standard"})
    client = session.client("s3", endpoint_url=endpoint_url, config=retries)
    creds = session.get_credentials()
    hidden = [s for s in (getattr(creds, "secret_key", None), getattr(creds, "token", None)) if s]

    def scrub(text: str) -> str:
        for secret in hidden:
            text = text.replace(secret, "***")
        return redact_url(text) or ""

    return client, scrub


class S3Storage(Storage):
    """Objects under `s3://bucket/prefix`; a stored folder is the objects under its key plus the marker."""

    def __init__(self, bucket: str, prefix: str, client: Any, scrub: Callable[[str], str] = lambda t: t) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        self._scrub = scrub

    @classmethod
    def from_uri(cls, uri: str, **settings: Any) -> "S3Storage":
        """Open `s3://bucket/prefix` with boto3 (see `make_s3_client` for `settings`)."""
        bucket, prefix = split_s3_uri(uri)
        client, scrub = make_s3_client(**settings)
        return cls(bucket, prefix, client, scrub)

    def __repr__(self) -> str:
        endpoint = redact_url(getattr(getattr(self._client, "meta", None), "endpoint_url", None))
        return f"S3Storage('s3://{self.bucket}/{self.prefix}', endpoint={endpoint!r})"

    # -- keys ----------------------------------------------------------------------------------
    def _full(self, key: str) -> str:
        key = normalize_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_key(self, uri_or_key: str) -> str:
        """The bucket key of a key relative to this storage, or of a full s3:// URI in its bucket."""
        if not uri_or_key.startswith("s3://"):
            return self._full(uri_or_key)
        bucket, key = split_s3_uri(uri_or_key)
        if bucket != self.bucket or not key:
            raise StorageError(
                f"{uri_or_key} is not an object of {self!r}; open it with open_storage('s3://{bucket}/...')"
            )
        return normalize_key(key)

    def uri_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._full(key)}"

    @contextlib.contextmanager
    def _guard(self, op: str, key: str) -> Iterator[None]:
        """Turn boto3/botocore failures into StorageError naming `op` and the URI, secrets scrubbed."""
        from botocore.exceptions import BotoCoreError, ClientError
        from boto3.exceptions import Boto3Error

        try:
            yield
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            detail = f"{err.get('Code', '?')} (HTTP {status}): {err.get('Message', '')}"
            raise StorageError(self._scrub(f"S3 {op} s3://{self.bucket}/{key} failed: {detail}")) from None
        except (BotoCoreError, Boto3Error) as exc:
            raise StorageError(
                self._scrub(f"S3 {op} s3://{self.bucket}/{key} failed: {type(exc).__name__}: {exc}")
            ) from None

    def _is_missing(self, op: str, key: str) -> bool:
        """True when `key` does not exist (HEAD 404); other failures raise StorageError."""
        from botocore.exceptions import ClientError

        with self._guard(op, key):
            try:
                self._client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) in _MISSING:
                    return True
                raise
        return False

    # -- files ---------------------------------------------------------------------------------
    def put_file(self, local_path: str | Path, key: str) -> str:
        src, full = Path(local_path), self._full(key)
        if not src.is_file():
            raise StorageError(f"cannot store {src}: it is not a file")
        with self._guard("upload", full):
            self._client.upload_file(str(src), self.bucket, full)
        return f"s3://{self.bucket}/{full}"

    def get_file(self, uri_or_key: str, local_path: str | Path) -> Path:
        key, dest = self._object_key(uri_or_key), Path(local_path)
        if self._is_missing("get", key):
            raise StorageError(f"cannot fetch s3://{self.bucket}/{key}: no such object")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_sibling(dest)
        try:
            with raising_disk_full(dest, cleanup=lambda: tmp.unlink(missing_ok=True)), self._guard("download", key):
                self._client.download_file(self.bucket, key, str(tmp))
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        return dest

    def exists(self, key: str) -> bool:
        full = self._full(key)
        return not self._is_missing("head", full) or not self._is_missing("head", f"{full}/{UPLOAD_MARKER}")

    def _keys_under(self, full: str) -> list[str]:
        """Bucket keys equal to `full` or below `full/` (every page of the listing)."""
        found: list[str] = []
        with self._guard("list", full):
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            for page in pages:
                found += [o["Key"] for o in page.get("Contents", [])]
        return sorted(k for k in found if not full or k == full or k.startswith(full + "/"))

    def list(self, prefix: str = "") -> list[str]:
        full = self._full(prefix) if prefix.strip("/") else self.prefix
        cut = len(self.prefix) + 1 if self.prefix else 0
        return [k[cut:] for k in self._keys_under(full)]

    # -- folders -------------------------------------------------------------------------------
    def put_dir(self, local_dir: str | Path, key: str) -> str:
        files, base = local_files(Path(local_dir)), self._full(key)
        marker = f"{base}/{UPLOAD_MARKER}"
        with self._guard("delete", marker):  # a re-upload is never mistaken for complete midway
            self._client.delete_object(Bucket=self.bucket, Key=marker)
        for rel, path in files.items():
            with self._guard("upload", f"{base}/{rel}"):
                self._client.upload_file(str(path), self.bucket, f"{base}/{rel}")
        wanted = {f"{base}/{rel}" for rel in files} | {marker}
        for stale in (k for k in self._keys_under(base) if k not in wanted):  # left by an older upload
            with self._guard("delete", stale):
                self._client.delete_object(Bucket=self.bucket, Key=stale)
        body = json.dumps(manifest_of(files)).encode()
        with self._guard("upload", marker):
            self._client.put_object(Bucket=self.bucket, Key=marker, Body=body, ContentType="application/json")
        return f"s3://{self.bucket}/{base}"

    def _read_manifest(self, base: str) -> dict[str, int]:
        marker = f"{base}/{UPLOAD_MARKER}"
        if self._is_missing("get", marker):
            present = len(self._keys_under(base))
            raise StorageError(
                f"refusing s3://{self.bucket}/{base}: no {UPLOAD_MARKER} marker ({present} objects under it), so "
                "its upload is incomplete or still running; re-run put_dir, or wait for the writer to finish"
            )
        with self._guard("get", marker):
            body = self._client.get_object(Bucket=self.bucket, Key=marker)["Body"].read()
        return parse_manifest(body, f"s3://{self.bucket}/{base}")

    def get_dir(self, uri_or_key: str, local_dir: str | Path) -> Path:
        base, dest = self._object_key(uri_or_key), Path(local_dir)
        expected = self._read_manifest(base)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_sibling(dest)
        try:
            with raising_disk_full(dest, cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True)):
                tmp.mkdir()
                for rel in expected:
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    with self._guard("download", f"{base}/{rel}"):
                        self._client.download_file(self.bucket, f"{base}/{rel}", str(tmp / rel))
            check_download(tmp, expected, f"s3://{self.bucket}/{base}")
            replace_dir(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest
