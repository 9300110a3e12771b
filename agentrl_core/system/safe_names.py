"""Names that become paths (run, stage and storage names): one safe path component, checked at the config boundary.

A name is 1-100 letters, digits, `.`, `_` or `-`, starting with a letter or digit: no separator,
no `..`, no absolute path, no NUL or other control character, no leading `-` that a shell would
read as an option. `path_under` joins such names under a root and refuses a result that resolves
(through symlinks) outside it. Both raise ValueError, so pydantic reports them against the field.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

MAX_NAME_CHARS = 100
"""Longest name: it is embedded in longer file names (temporary siblings, S3 keys) under NAME_MAX (255)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RULE = f"use 1-{MAX_NAME_CHARS} letters, digits, '.', '_' or '-', starting with a letter or digit"


def _control_chars(text: str) -> list[str]:
    """The control and format characters of `text` (NUL, newlines, escapes, bidi overrides), as repr."""
    return sorted({repr(c) for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs")})


def _why_unsafe(name: str) -> str | None:
    """Why `name` is not one safe path component, or None when it is."""
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name)} characters long (at most {MAX_NAME_CHARS})"
    bad_controls = _control_chars(name)
    if bad_controls:
        return f"it contains the control character(s) {', '.join(bad_controls)}"
    separators = sorted({c for c in name if c in "/\\"})
    if separators:
        return f"it contains the path separator(s) {' '.join(separators)}: a name is one folder, not a path"
    if name in (".", ".."):
        return f"{name!r} is a relative folder reference, not a name"
    if _NAME.fullmatch(name) is None:
        odd = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
        return f"it contains {' '.join(map(repr, odd))}" if odd else "it starts with '.', '_' or '-'"
    return None


def check_name(name: str) -> str:
    """`name` unchanged if it is one safe path component; ValueError saying why and what to use otherwise."""
    why = _why_unsafe(name)
    if why is not None:
        raise ValueError(f"{name[:120]!r} cannot be a folder name: {why}; {_RULE}")
    return name


SafeName = Annotated[str, AfterValidator(check_name)]
"""A str field that must be one safe path component (see `check_name`)."""


def check_path_text(path: str | Path) -> str | Path:
    """`path` unchanged unless its text holds a control character (a NUL truncates it in C calls)."""
    bad_controls = _control_chars(str(path))
    if bad_controls:
        raise ValueError(f"{str(path)[:120]!r} is not a usable path: it contains the control character(s) "
                         f"{', '.join(bad_controls)}")
    return path


def path_under(root: str | Path, *names: str) -> Path:
    """`root / name / ...` after checking each name, and that the result, with symlinks resolved,
    stays inside `root` resolved (a link planted at root/name cannot redirect the writes)."""
    for name in names:
        check_name(name)
    path = Path(root).joinpath(*names)
    real_root, real_path = Path(root).resolve(), path.resolve()
    if real_path != real_root and real_root not in real_path.parents:
        raise ValueError(f"{path} resolves to {real_path}, outside its root {real_root} (a symbolic link?); "
                         "remove the link or choose another name")
    return path


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
MAX_S3_PREFIX_BYTES = 512
"""Longest S3 prefix: keys under it (run/export/stage/file) must fit S3's 1024-byte key limit."""


def check_storage_location(uri: str | None) -> str | None:
    """`uri` unchanged if it is None, a local path, file://path or s3://bucket/prefix whose prefix is
    made of plain key parts (no '.', '..', empty part or control character); ValueError otherwise.
    The message names the part at fault, never the whole URI (it may carry a user name)."""
    if uri is None:
        return None
    if _control_chars(uri):
        raise ValueError(f"storage holds the control character(s) {', '.join(_control_chars(uri))}")
    if "://" in uri and not uri.startswith(("s3://", "file://")):
        raise ValueError(f"unsupported storage scheme {uri.split('://', 1)[0]!r}: use a local path, file://path "
                         "or s3://bucket/prefix")
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        if _S3_BUCKET.fullmatch(bucket) is None or ".." in bucket:
            raise ValueError(f"S3 bucket {bucket[:80]!r} is not a valid bucket name (3-63 lowercase letters, "
                             "digits, '.' or '-', starting and ending with a letter or digit)")
        parts = prefix.strip("/").split("/") if prefix.strip("/") else []
        wrong = [p for p in parts if p in ("", ".", "..")]
        if wrong:
            raise ValueError(f"the S3 prefix has an empty, '.' or '..' part ({wrong[0]!r}): give a plain "
                             "prefix such as s3://bucket/team/runs")
        if len(prefix.encode()) > MAX_S3_PREFIX_BYTES:
            raise ValueError(f"the S3 prefix is {len(prefix.encode())} bytes long (at most {MAX_S3_PREFIX_BYTES})")
    return uri
