"""Mixed precision: bf16 autocast over fp32 weights (about 2x faster on CPUs with AVX512-BF16)."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch


def autocast(model: Any, mode: str) -> ContextManager[Any]:
    """`torch.autocast` on the model's device when mode is "bfloat16"; a no-op when "off"."""
    if mode == "off":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=getattr(torch, mode))
