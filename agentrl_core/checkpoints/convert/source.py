"""What every source reader returns: full (unsharded) tensors by HF name, and where metadata may be."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from agentrl_core.errors import CheckpointError

WRAPPER_PARTS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""Name parts that wrappers (torch.compile, FSDP1, activation checkpointing) add anywhere in keys."""
LEADING_PREFIXES = ("module.",)
"""Prefixes that an outer wrapper (DDP, a DeepSpeed engine) adds; removed only at the start."""


@dataclass
class SourceWeights:
    """Full tensors of one checkpoint plus the folders that may hold its config and tokenizer.

    `tensors`: HF parameter name -> full tensor (e.g. `model.embed_tokens.weight`: [vocab, hidden]).
    `meta_dirs`: folders to search, in order, for config.json / tokenizer / generation_config.
    `fmt`: the format name the reader handles; `info`: facts for the COMPLETE marker.
    """

    tensors: dict[str, torch.Tensor]
    meta_dirs: list[Path]
    fmt: str
    info: dict = field(default_factory=dict)


def strip_wrappers(name: str) -> str:
    """`name` without wrapper parts (`module._fsdp_wrapped_module.model.x` -> `model.x`)."""
    for part in WRAPPER_PARTS:
        name = name.replace("." + part, ".").removeprefix(part)
    for prefix in LEADING_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def clean_state_dict(raw: dict, where: Path) -> dict[str, torch.Tensor]:
    """Tensor entries of a model state dict with wrapper parts removed from their names.

    A nested `{"model": {...}, "optimizer": ...}` (a whole training state) is narrowed to "model".
    Non-tensor entries (extra state, step counters) are dropped.
    """
    if isinstance(raw.get("model"), dict):
        raw = raw["model"]
    tensors: dict[str, torch.Tensor] = {}
    for key, value in raw.items():
        if not isinstance(value, torch.Tensor):
            continue
        name = strip_wrappers(key)
        if name in tensors:
            raise CheckpointError(
                f"{where}: two entries map to the parameter name {name!r} after unwrapping"
            )
        tensors[name] = value
    if not tensors:
        raise CheckpointError(
            f"{where}: no tensors found in the model state (keys: {sorted(raw)[:8]})"
        )
    return tensors
