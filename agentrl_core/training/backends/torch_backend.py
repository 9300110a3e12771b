"""The plain-PyTorch backend: AdamW + LambdaLR in this process, exactly as `policy_update` steps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from agentrl_core.checkpoints import load_checkpoint, save_checkpoint
from agentrl_core.config import OptimConfig
from agentrl_core.training.optim import build_optimizer


class TorchBackend:
    """Backward with autograd, clip_grad_norm_ + AdamW step + schedule step, our checkpoint layout.

    `step()` matches `policy_update._optimizer_step`: ||g|| = clip_grad_norm_(params, grad_clip)
    (the norm before clipping; gradients are scaled by min(1, grad_clip / ||g||)), then
    optimizer.step(), scheduler.step(), zero_grad(set_to_none=True).
    """

    steps_without_backward = True
    """`step()` after no backward at all is a no-op update that advances the schedule (AdamW skips
    parameters without a gradient), so an update with nothing to back-propagate may skip the work."""

    def __init__(self, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any, grad_clip: float, *,
                 tokenizer: Any = None, save_model: Any = None) -> None:
        if grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0, got {grad_clip}")
        self._model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.grad_clip, self.tokenizer = grad_clip, tokenizer
        self._save_model = save_model if save_model is not None else model  # a LoRA run saves its PeftModel
        self._steps = 0

    @classmethod
    def build(cls, model: Any, optim: OptimConfig, total_steps: int, **kwargs: Any) -> TorchBackend:
        """AdamW over the trainable parameters with `optim`'s schedule (see `build_optimizer`)."""
        optimizer, scheduler = build_optimizer(model, optim, total_steps)
        return cls(model, optimizer, scheduler, optim.grad_clip, **kwargs)

    @property
    def module(self) -> Any:
        return self._model

    @property
    def model(self) -> Any:
        return self._model

    @property
    def forward_module(self) -> Any:
        return self._model

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate d loss / d params into `.grad` (no rescaling)."""
        loss.backward()

    def step(self) -> float:
        """Clip, update, advance the schedule, clear gradients; the pre-clip global norm."""
        params = [p for p in self._model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.zero_grad()
        self._steps += 1
        return float(grad_norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @property
    def lr(self) -> float:
        """The learning rate the next step uses (the scheduler's last computed value)."""
        return float(self.scheduler.get_last_lr()[0])

    @property
    def steps_done(self) -> int:
        return self._steps

    def save(self, folder: Path, step: int, client_state: dict[str, Any] | None = None) -> Path:
        """An atomic `step_<step>` checkpoint under `folder` (weights, tokenizer, optimizer, schedule)."""
        return save_checkpoint(folder, step, model=self._save_model, tokenizer=self.tokenizer,
                               optimizer=self.optimizer, scheduler=self.scheduler, state=client_state or {})

    def load(self, folder: Path) -> dict[str, Any]:
        """Restore weights, optimizer and schedule from a checkpoint folder; its trainer state."""
        state = load_checkpoint(folder, model=self._save_model, optimizer=self.optimizer, scheduler=self.scheduler)
        self._steps = int(state.get("step", 0))
        return state

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's parameters and buffers by Hugging Face name (views, no copies)."""
        yield from self._model.state_dict().items()
