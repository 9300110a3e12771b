"""Reader for torch.distributed.checkpoint (DCP) folders: `.metadata` + `__{rank}_{i}.distcp` files.

FSDP's SHARDED_STATE_DICT / `dcp.save` writes one `.distcp` file per rank holding that rank's
shards, and `.metadata` mapping every global tensor (shape, dtype) to its chunks. DCP's own
`dcp_to_torch_save` reassembles the full tensors in one process (no process group needed).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentrl_core.checkpoints.convert.pickles import load_torch_file
from agentrl_core.checkpoints.convert.source import SourceWeights, clean_state_dict
from agentrl_core.errors import CheckpointError

METADATA_FILE = ".metadata"


def is_dcp_folder(path: Path) -> bool:
    """True when `path` holds a DCP `.metadata` file and at least one `.distcp` file."""
    return (path / METADATA_FILE).is_file() and any(path.glob("*.distcp"))


def read_dcp(path: Path) -> SourceWeights:
    """Full tensors of a DCP folder; a saved `{"model": ..., "optimizer": ...}` is narrowed to the model."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not is_dcp_folder(path):
        raise CheckpointError(
            f"{path} is not a DCP folder (expected {METADATA_FILE} and *.distcp files)"
        )
    with tempfile.TemporaryDirectory(prefix="agentrl-dcp-") as scratch:
        merged = Path(scratch) / "full.pt"
        try:
            dcp_to_torch_save(str(path), str(merged))
        except Exception as err:  # DCP raises many types for a damaged folder
            raise CheckpointError(
                f"cannot read the DCP checkpoint {path}: {type(err).__name__}: {err}"
            ) from err
        state = load_torch_file(merged)
    tensors = clean_state_dict(state, path)
    meta_dirs = [path, path / "huggingface", path.parent, path.parent / "huggingface"]
    return SourceWeights(tensors=tensors, meta_dirs=meta_dirs, fmt="dcp")
