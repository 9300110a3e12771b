"""Mixed precision: bf16 autocast over fp32 weights (which one is fastest here: models/compute_settings.py)."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch


def autocast(model: Any, mode: str) -> ContextManager[Any]:
    """`torch.autocast` to `mode` on the model's device; a no-op when mode is "float32"."""
    if mode == "float32":
        return contextlib.nullcontext()
    if mode not in ("bfloat16", "float16"):
        raise ValueError(f"compute dtype {mode!r} reached the model unresolved: resolve the recipe first with "
                         "agentrl_core.models.compute_settings.resolve_compute_settings(cfg, model_path) (auto becomes "
                         "float32 or bfloat16 for this machine)")
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=getattr(torch, mode))
