"""Mixed precision: bf16 autocast over fp32 weights (about 2x faster on CPUs with AVX512-BF16)."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch


def autocast(model: Any, mode: str) -> ContextManager[Any]:
    """`torch.autocast` to `mode` on the model's device; a no-op when mode is "float32"."""
    if mode == "float32":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=getattr(torch, mode))
