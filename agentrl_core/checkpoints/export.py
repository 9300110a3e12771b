"""Export a checkpoint as a standalone Hugging Face model folder, written atomically.

A full-weight checkpoint's model folder is copied. A LoRA checkpoint (its model folder holds a
peft adapter) is merged: the base model named in its trainer state is loaded in float32, each
targeted weight becomes W' = W + (alpha/r)·B A (`merge_and_unload`), and the result is saved as
a plain model (in the base's stored dtype) that loads without peft. So stages chain unchanged:
SFT's export is a merged model, and a LoRA GRPO stage starting from it adds fresh adapters on top.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from agentrl_core.checkpoints.atomic import (
    MARKER,
    atomic_dir,
    cleanup_stale,
    is_complete,
)
from agentrl_core.checkpoints.layout import STATE_FILE
from agentrl_core.checkpoints.weights import model_folder, weight_files
from agentrl_core.errors import CheckpointError
from agentrl_core.models.lora import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    is_adapter_folder,
    merged_model,
)

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# Files of a LoRA checkpoint's model folder that do not belong in a merged export.
ADAPTER_ONLY_FILES = {ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, "README.md", MARKER}


def _check_source(checkpoint_path: Path) -> Path:
    """The HF folder inside a complete checkpoint, or CheckpointError saying what is missing."""
    if not checkpoint_path.is_dir():
        raise CheckpointError(f"cannot export {checkpoint_path}: it does not exist")
    if not is_complete(checkpoint_path):
        raise CheckpointError(f"cannot export {checkpoint_path}: no {MARKER} marker (an interrupted save)")
    source = model_folder(checkpoint_path)
    if is_adapter_folder(source):
        missing = [] if (source / ADAPTER_WEIGHTS_FILE).is_file() else [ADAPTER_WEIGHTS_FILE]
    else:
        weight_files(source)  # raises with the list of files when there are no safetensors
        missing = [] if (source / CONFIG_FILE).is_file() else [CONFIG_FILE]
    if not any((source / name).is_file() for name in TOKENIZER_FILES):
        missing.append(f"tokenizer (one of {list(TOKENIZER_FILES)})")
    if missing:
        raise CheckpointError(
            f"cannot export {checkpoint_path}: {source} lacks {', '.join(missing)}; "
            "save checkpoints with both the model and its tokenizer"
        )
    return source


def _write_generation_config(folder: Path) -> None:
    """Derive generation_config.json from config.json when the model folder has none."""
    from transformers import (  # heavy import, only when needed
        AutoConfig,
        GenerationConfig,
    )

    config = AutoConfig.from_pretrained(folder)
    GenerationConfig.from_model_config(config).save_pretrained(folder)


def check_target(out_dir: Path) -> None:
    """Refuse to replace a folder we did not write (no marker), unless it is empty."""
    if not out_dir.exists() or is_complete(out_dir):
        return
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        out_dir.rmdir()
        return
    raise CheckpointError(
        f"refusing to overwrite {out_dir}: it exists and is not a complete export "
        f"(no {MARKER} marker); delete it or choose another out_dir"
    )


def export_hf(checkpoint_path: str | Path, out_dir: str | Path) -> Path:
    """Copy a checkpoint's model into `out_dir` as a folder `from_pretrained` loads on its own.

    The folder holds config, safetensors weights, tokenizer files, generation_config and a
    COMPLETE marker; it is built under a temporary name and renamed, replacing a previous
    complete export atomically. A LoRA checkpoint's adapter is merged into its base model.
    """
    checkpoint_path, out_dir = Path(checkpoint_path), Path(out_dir)
    source = _check_source(checkpoint_path)
    state = _trainer_state(checkpoint_path)
    base = _base_model(checkpoint_path, source, state) if is_adapter_folder(source) else None
    cleanup_stale(out_dir.parent)
    check_target(out_dir)
    info = {"source": str(checkpoint_path.resolve())}
    if "step" in state:
        info["step"] = state["step"]
    if base is not None:
        info["merged_lora_into"] = str(base)
    with atomic_dir(out_dir, info) as tmp:
        if base is None:
            for item in source.iterdir():
                if item.is_file() and item.name != MARKER:
                    shutil.copy2(item, tmp / item.name)
        else:
            _write_merged(source, base, tmp)
        if not (tmp / GENERATION_CONFIG_FILE).is_file():
            _write_generation_config(tmp)
    logger.info("exported %s to %s%s", checkpoint_path, out_dir, f" (LoRA merged into {base})" if base else "")
    return out_dir


def _trainer_state(checkpoint_path: Path) -> dict:
    state_file = checkpoint_path / STATE_FILE
    return json.loads(state_file.read_text(encoding="utf-8")) if state_file.is_file() else {}


def _base_model(checkpoint_path: Path, source: Path, state: dict) -> Path:
    """The base model folder of a LoRA checkpoint: trainer state's base_model, else peft's record."""
    adapter_cfg = json.loads((source / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    named = state.get("base_model") or adapter_cfg.get("base_model_name_or_path")
    if not named or not (Path(named) / CONFIG_FILE).is_file():
        raise CheckpointError(
            f"cannot export {checkpoint_path}: it holds a LoRA adapter whose base model {named!r} is not a "
            "local model folder any more; restore that folder (the run's init model) and export again")
    return Path(named)


def _write_merged(source: Path, base: Path, tmp: Path) -> None:
    """Merge the adapter in `source` into `base` (float32) and save a plain HF folder into `tmp`."""
    import torch

    from agentrl_core.models.loading import load_model  # heavy: torch + transformers

    merged = merged_model(load_model(base, dtype="float32"), source)
    stored = _stored_dtype(base)
    if stored is not None and stored != torch.float32:
        merged = merged.to(stored)
    merged.save_pretrained(tmp, safe_serialization=True)
    for item in source.iterdir():  # tokenizer files and chat template, saved with the checkpoint
        if item.is_file() and item.name not in ADAPTER_ONLY_FILES:
            shutil.copy2(item, tmp / item.name)
    base_generation = base / GENERATION_CONFIG_FILE
    if base_generation.is_file():
        shutil.copy2(base_generation, tmp / GENERATION_CONFIG_FILE)


def _stored_dtype(folder: Path):
    """The parameter dtype the base model was saved in (config `dtype`/`torch_dtype`), or None."""
    import torch

    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    name = config.get("dtype") or config.get("torch_dtype")
    value = getattr(torch, name, None) if isinstance(name, str) else None
    return value if isinstance(value, torch.dtype) and value.is_floating_point else None
