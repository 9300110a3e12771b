"""Reader for our own checkpoints: a `step_*` folder (its `model/`) or any HF safetensors folder.

Both one `model.safetensors` and shards named by `model.safetensors.index.json` are read.
"""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from agentrl_core.checkpoints.atomic import MARKER, is_complete
from agentrl_core.checkpoints.convert.source import SourceWeights
from agentrl_core.checkpoints.layout import parse_step
from agentrl_core.checkpoints.weights import model_folder, weight_files
from agentrl_core.errors import CheckpointError


def read_ours(path: Path) -> SourceWeights:
    """Full tensors of a checkpoint step folder or HF folder; refuses a half-written step folder."""
    if parse_step(path) is not None and not is_complete(path):
        raise CheckpointError(
            f"cannot convert {path}: no {MARKER} marker (an interrupted save)"
        )
    folder = model_folder(path)
    tensors = {}
    for file in weight_files(folder):
        tensors.update(load_file(str(file), device="cpu"))
    return SourceWeights(
        tensors=tensors, meta_dirs=[folder], fmt="ours", info={"step": parse_step(path)}
    )
