"""Export a checkpoint as a standalone Hugging Face model folder, written atomically."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from agentrl_core.checkpoints.atomic import MARKER, atomic_dir, cleanup_stale, is_complete
from agentrl_core.checkpoints.layout import STATE_FILE
from agentrl_core.checkpoints.weights import model_folder, weight_files
from agentrl_core.errors import CheckpointError

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def _check_source(checkpoint_path: Path) -> Path:
    """The HF folder inside a complete checkpoint, or CheckpointError saying what is missing."""
    if not checkpoint_path.is_dir():
        raise CheckpointError(f"cannot export {checkpoint_path}: it does not exist")
    if not is_complete(checkpoint_path):
        raise CheckpointError(f"cannot export {checkpoint_path}: no {MARKER} marker (an interrupted save)")
    source = model_folder(checkpoint_path)
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
    from transformers import AutoConfig, GenerationConfig  # heavy import, only when needed

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
    complete export atomically.
    """
    checkpoint_path, out_dir = Path(checkpoint_path), Path(out_dir)
    source = _check_source(checkpoint_path)
    cleanup_stale(out_dir.parent)
    check_target(out_dir)
    info = {"source": str(checkpoint_path.resolve())}
    state_file = checkpoint_path / STATE_FILE
    if state_file.is_file():
        info["step"] = json.loads(state_file.read_text(encoding="utf-8")).get("step")
    with atomic_dir(out_dir, info) as tmp:
        for item in source.iterdir():
            if item.is_file() and item.name != MARKER:
                shutil.copy2(item, tmp / item.name)
        if not (tmp / GENERATION_CONFIG_FILE).is_file():
            _write_generation_config(tmp)
    logger.info("exported %s to %s", checkpoint_path, out_dir)
    return out_dir
