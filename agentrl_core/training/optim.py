"""AdamW and its learning-rate schedule (linear warm-up, then constant, linear or cosine)."""

from __future__ import annotations

import math
from typing import Any

import torch

from agentrl_core.config import OptimConfig


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based).

    warm-up: (step+1)/warmup; then with p = progress in [0, 1] and m = min_lr_ratio:
    constant 1; linear m + (1-m)(1-p); cosine m + (1-m)·½(1 + cos(πp)).
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total - cfg.warmup_steps)
    p = min(1.0, (step - cfg.warmup_steps) / span)
    m = cfg.min_lr_ratio
    if cfg.schedule == "linear":
        return m + (1 - m) * (1 - p)
    return m + (1 - m) * 0.5 * (1 + math.cos(math.pi * p))


def build_optimizer(model: Any, cfg: OptimConfig, total_steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters, and a LambdaLR following `lr_factor`."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total_steps, cfg))
    return opt, sched
