"""The model cache on disk: where imported models live, their completion marker, lock and atomic install.

Layout under `agentrl_home()` (default `~/.cache/agentrl`, or `$AGENTRL_HOME`):

    models/<alias>/                      a complete Hugging Face folder (config.json, model.safetensors,
                                         tokenizer files) holding the marker AGENTRL_MODEL_COMPLETE
    models/.<alias>.lock                 flock()ed while a process imports <alias>
    models/.<alias>.tmp-<pid>-<hex>/     being written; renamed to <alias>/ once the marker is in it

A model folder without the marker is never used: the marker is written last, inside the temporary
folder, and the folder only gets its final name by one rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentrl_core.errors import AgentRLError
from agentrl_core.system.fsync import fsync_dir
from agentrl_core.system.home import agentrl_home

MARKER = "AGENTRL_MODEL_COMPLETE"
"""Name of the marker file (JSON metadata) written last into every complete model folder."""


class ModelLockTimeout(AgentRLError, TimeoutError):
    """Another process held a model's import lock for longer than we were willing to wait."""


def models_dir() -> Path:
    """The folder that holds one sub-folder per imported model."""
    return agentrl_home() / "models"


def model_dir(alias: str) -> Path:
    """Where the model imported under `alias` lives (complete or not)."""
    return models_dir() / alias


def is_complete(folder: Path) -> bool:
    """True when `folder` holds a readable marker, i.e. a finished import."""
    try:
        read_marker(folder)
    except (OSError, ValueError):
        return False
    return True


def read_marker(folder: Path) -> dict[str, Any]:
    """The metadata written into `folder`'s marker (raises OSError/ValueError if absent or corrupt)."""
    return json.loads((folder / MARKER).read_text(encoding="utf-8"))


def write_marker(folder: Path, metadata: dict[str, Any]) -> None:
    """Write the marker, flushed to disk, so a later rename cannot publish an empty one."""
    path = folder / MARKER
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(metadata, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def model_lock(alias: str, *, timeout_s: float = 3600.0, on_wait: Any = None) -> Iterator[Path]:
    """Hold the exclusive import lock of `alias` (flock on `models/.<alias>.lock`).

    The kernel drops the lock when its holder dies, so a crash never leaves a stale lock. `on_wait`
    (no arguments) is called once if another process holds it, e.g. to tell the user why we wait.
    """
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / f".{alias}.lock"
    with open(lock_path, "a+b") as fh:
        _acquire(fh.fileno(), lock_path, timeout_s, on_wait)
        try:
            yield lock_path
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _acquire(fd: int, lock_path: Path, timeout_s: float, on_wait: Any) -> None:
    # Poll instead of a blocking flock so a hung holder gives a clear error, not a silent hang.
    deadline = time.monotonic() + timeout_s
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            if time.monotonic() >= deadline:
                raise ModelLockTimeout(
                    f"{lock_path} is still held by another process after {timeout_s:.0f} s; wait for that "
                    "import to finish, or stop it and run the import again"
                ) from None
            time.sleep(0.1)


def new_temp_dir(alias: str) -> Path:
    """A fresh hidden folder next to `model_dir(alias)`, so the final rename stays on one filesystem."""
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f".{alias}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    return path


def remove_stale_temp_dirs(alias: str) -> None:
    """Delete temporary folders a crashed import of `alias` left behind (call only under its lock)."""
    for path in models_dir().glob(f".{alias}.tmp-*"):
        shutil.rmtree(path, ignore_errors=True)


def install(temp: Path, alias: str) -> Path:
    """Publish the complete folder `temp` as `model_dir(alias)`, replacing any folder there.

    A folder already at the final name (an incomplete one, or a complete one being re-imported) is
    first renamed aside, so the final name goes from old to new with no moment of a half folder.
    """
    if not is_complete(temp):
        raise AgentRLError(f"{temp} has no {MARKER}; refusing to install an unfinished model folder")
    final = model_dir(alias)
    aside = None
    if final.exists():
        aside = final.with_name(f".{alias}.tmp-{os.getpid()}-{secrets.token_hex(4)}-old")
        os.rename(final, aside)
    os.rename(temp, final)
    fsync_dir(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return final
