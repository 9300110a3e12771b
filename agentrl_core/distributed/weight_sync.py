"""Weight sync: versioned state dicts from the trainer to the rollout workers, checked on both ends.

Version v is the number of optimizer steps behind the weights (the step of the checkpoint they
equal). A worker accepts only a newer version than it holds, so a late or repeated message can
never roll it back; the driver then checks that every worker reports exactly v.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from agentrl_core.errors import AgentRLError

UNSYNCED = -1
"""The version of a worker that holds the initial model and has not been synced yet."""


class StaleWeightsError(AgentRLError):
    """A worker was offered weights that are not newer than the ones it holds."""


class WeightSyncError(AgentRLError):
    """After a sync, a worker does not report the version it was sent."""


def accept(current: int, offered: int) -> None:
    """Raise StaleWeightsError unless `offered` is newer than `current`."""
    if offered <= current:
        raise StaleWeightsError(f"offered weights version {offered} but this worker already holds version {current}; "
                                "versions must increase (a stale or repeated sync)")


def load_into(model: Any, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Copy every tensor into the model (strict: the same keys, shapes); dtypes are cast to the model's."""
    with torch.no_grad():
        model.load_state_dict(dict(state_dict), strict=True)


def check_versions(reported: Sequence[int], version: int, names: Sequence[str]) -> None:
    """Raise WeightSyncError naming every worker that does not report `version`."""
    wrong = [f"{n} has {v}" for n, v in zip(names, reported) if v != version]
    if wrong:
        raise WeightSyncError(f"weight sync to version {version} failed: {', '.join(wrong)}")


def sync_weights(workers: Sequence[Any], names: Sequence[str], version: int, state_ref: Any) -> None:
    """Send one object-store copy of the weights to every worker, then verify each reports `version`.

    `state_ref` is an ObjectRef of the state dict (put once per step); Ray resolves it in each worker.
    Raises ray.exceptions.RayActorError when a worker is dead (the caller replaces it).
    """
    import ray

    ray.get([w.load_weights.remote(version, state_ref) for w in workers])
    check_versions(ray.get([w.weights_version.remote() for w in workers]), version, names)


MODEL_FOLDER_LIMIT = 8 * 2**30
"""Largest model folder sent through the object store (a 135M-3B model in bf16 fits; beyond, use shared storage)."""


def folder_files(folder: str | Path) -> dict[str, bytes]:
    """Every file of a model folder (config, tokenizer, weights) by its path inside the folder: what a
    rollout worker on another node needs to build the model, sent once through the object store."""
    root = Path(folder)
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    size = sum(p.stat().st_size for p in files.values())
    if size > MODEL_FOLDER_LIMIT:
        raise AgentRLError(f"{root} holds {size / 2**30:.1f} GiB, more than the {MODEL_FOLDER_LIMIT / 2**30:g} GiB "
                           "sent through Ray's object store; put the model where every node reads the same path")
    return {name: path.read_bytes() for name, path in files.items()}


@contextmanager
def materialised(model: str | Mapping[str, bytes]) -> Iterator[str]:
    """A folder holding `model` for the block: the path itself, or the files written to a private temporary
    folder that is removed after (the caller loads what it needs inside the block)."""
    if isinstance(model, str):
        yield model
        return
    folder = tempfile.mkdtemp(prefix="agentrl-model-")  # mode 0700
    try:
        for name, data in model.items():
            target = Path(folder) / name
            if not target.resolve().is_relative_to(Path(folder).resolve()):
                raise AgentRLError(f"a model file named {name!r} would be written outside its folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
