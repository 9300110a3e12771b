"""Detect which trainer wrote a checkpoint folder, from the files in it (nothing is loaded)."""

from __future__ import annotations

from pathlib import Path

from agentrl_core.checkpoints.convert.deepspeed_zero import is_deepspeed_folder
from agentrl_core.checkpoints.convert.torch_dcp import is_dcp_folder
from agentrl_core.checkpoints.convert.verl_fsdp import verl_rank_files
from agentrl_core.checkpoints.weights import INDEX_FILE, SINGLE_FILE, model_folder
from agentrl_core.errors import CheckpointError

FORMATS = ("ours", "verl_fsdp", "dcp", "deepspeed")
"""Source formats `convert_to_hf` reads: our step/HF folders, verl FSDP actor, torch DCP, DeepSpeed ZeRO."""

_SHOWN = 12


def _is_ours(path: Path) -> bool:
    folder = model_folder(path)
    return (folder / SINGLE_FILE).is_file() or (folder / INDEX_FILE).is_file()


def _is_verl(path: Path) -> bool:
    return bool(verl_rank_files(path) or verl_rank_files(path / "actor"))


_CHECKS = (
    ("verl_fsdp", _is_verl),
    ("dcp", is_dcp_folder),
    ("deepspeed", is_deepspeed_folder),
    ("ours", _is_ours),
)


def detect_format(path: str | Path) -> str:
    """The format name (one of FORMATS) of the checkpoint folder `path`, or CheckpointError saying why none fits."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"cannot convert {path}: no such folder")
    for name, check in _CHECKS:
        if check(path):
            return name
    found = sorted(p.name for p in path.iterdir())
    more = f" (+{len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
    raise CheckpointError(
        f"cannot tell what wrote {path}; it holds {found[:_SHOWN]}{more}. Expected one of: "
        f"our checkpoint (model/ or {SINGLE_FILE} / {INDEX_FILE}); verl FSDP (model_world_size_W_rank_r.pt, "
        "maybe under actor/); torch DCP (.metadata + *.distcp); DeepSpeed ZeRO (`latest` + global_stepN/ "
        "with *_optim_states.pt). Pass the folder that holds these files, or fmt=... explicitly"
    )
