"""Model weights of a Hugging Face folder: find its safetensors files and load them strictly.

Loads what `save_pretrained` wrote for architectures whose saved names equal their
`state_dict()` names (Llama, Qwen, GPT-2, ...); for others use `from_pretrained` on the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from agentrl_core.checkpoints.layout import MODEL_DIR
from agentrl_core.errors import CheckpointError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_SHOWN_KEYS = 8


def model_folder(path: str | Path) -> Path:
    """The Hugging Face folder of a checkpoint (`path/model`), or `path` itself if it is one."""
    path = Path(path)
    return path / MODEL_DIR if (path / MODEL_DIR).is_dir() else path


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a Hugging Face folder: one file, or the shards its index names."""
    if (folder / INDEX_FILE).is_file():
        index = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
        return [folder / name for name in sorted(set(index["weight_map"].values()))]
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise CheckpointError(
        f"no safetensors weights in {folder} (expected {SINGLE_FILE} or {INDEX_FILE}; found {found}); "
        "save the model with save_pretrained(dir, safe_serialization=True)"
    )


def _aliases(model: torch.nn.Module) -> dict[str, set[str]]:
    """Names sharing one storage (tied weights): save_pretrained writes only one of them."""
    by_storage: dict[tuple[int, tuple], set[str]] = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() != 0:
            by_storage.setdefault((tensor.data_ptr(), tuple(tensor.shape)), set()).add(name)
    return {name: group for group in by_storage.values() for name in group}


def _key_report(label: str, keys: set[str]) -> str:
    shown = sorted(keys)[:_SHOWN_KEYS]
    more = f" (+{len(keys) - len(shown)} more)" if len(keys) > len(shown) else ""
    return f"{label} keys: {shown}{more}"


def load_model_weights(path: str | Path, model: torch.nn.Module) -> None:
    """Load the safetensors weights of a checkpoint (or HF folder) into `model`, strictly.

    Every `state_dict()` key must be in the files (a tied weight counts as present when its
    partner is) and every file key must be in the model; otherwise CheckpointError names them.
    """
    folder = model_folder(path)
    tensors: dict[str, torch.Tensor] = {}
    for file in weight_files(folder):
        tensors.update(load_file(str(file), device="cpu"))
    expected = set(model.state_dict())
    aliases = _aliases(model)
    missing = {k for k in expected - tensors.keys() if not (aliases.get(k, set()) & tensors.keys())}
    unexpected = set(tensors) - expected
    if missing or unexpected:
        parts = [_key_report("missing", missing)] if missing else []
        parts += [_key_report("unexpected", unexpected)] if unexpected else []
        raise CheckpointError(
            f"weights in {folder} do not match the model ({'; '.join(parts)}): "
            "was the checkpoint saved from a different architecture or config?"
        )
    try:
        model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise CheckpointError(f"weights in {folder} do not fit the model: {err}") from err
