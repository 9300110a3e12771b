"""A training stage's state: model, optimizer, schedule, metrics, checkpoints and resume."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl_core.checkpoints import latest_checkpoint, load_checkpoint, resolve_resume, save_checkpoint
from agentrl_core.config import OptimConfig
from agentrl_core.errors import CheckpointError
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.training.metrics import MetricsWriter
from agentrl_core.training.optim import build_optimizer

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    """What a finished stage hands on: its last checkpoint and summary metrics."""

    stage: str
    checkpoint: str
    steps: int
    resumed_from: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainingSession:
    """Everything a stage loop needs, restored from the last complete checkpoint when there is one."""

    stage_dir: Path
    init_model: str
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    total_steps: int
    start_step: int
    writer: MetricsWriter
    started: float = field(default_factory=time.time)

    @property
    def ckpt_root(self) -> Path:
        return self.stage_dir / "checkpoints"

    def save(self, step: int, keep_last: int, extra: dict[str, Any] | None = None) -> Path:
        """Write a complete, atomic checkpoint for `step`."""
        state = {"step": step, "init_model": self.init_model, "total_steps": self.total_steps, **(extra or {})}
        return save_checkpoint(self.ckpt_root, step, model=self.model, tokenizer=self.tokenizer,
                               optimizer=self.optimizer, scheduler=self.scheduler, state=state, keep_last=keep_last)

    def last_checkpoint(self) -> Path:
        path = latest_checkpoint(self.ckpt_root)
        if path is None:
            raise CheckpointError(f"{self.ckpt_root}: no complete checkpoint was written")
        return path


def open_session(stage_dir: Path, init_model: Path, optim: OptimConfig, total_steps: int, *,
                 resume: str, dtype: str = "float32", gradient_checkpointing: bool = False) -> TrainingSession:
    """Load the model (from the last checkpoint when resuming, else `init_model`) and its optimizer."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    ckpt = resolve_resume(stage_dir / "checkpoints", resume)
    source = ckpt / "model" if ckpt is not None else init_model
    model = load_model(source, dtype=dtype)
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    tokenizer = load_tokenizer(source)
    optimizer, scheduler = build_optimizer(model, optim, total_steps)
    start = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, optimizer=optimizer, scheduler=scheduler)
        _check_same_run(state, init_model, ckpt)
        start = int(state["step"])
        log.info("resuming %s from step %d (%s)", stage_dir.name, start, ckpt)
    writer = MetricsWriter(stage_dir, resume_step=start)
    return TrainingSession(stage_dir, str(init_model), model, tokenizer, optimizer, scheduler, total_steps, start, writer)


def _check_same_run(state: dict[str, Any], init_model: Path, ckpt: Path) -> None:
    if state.get("init_model") not in (None, str(init_model)):
        raise CheckpointError(
            f"{ckpt} continues a run that started from {state['init_model']}, not {init_model}; "
            "use a new run name (run.name=...) or delete the run folder to start afresh")
