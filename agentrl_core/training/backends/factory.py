"""Pick the training backend from `trainer.backend`: plain torch or DeepSpeed."""

from __future__ import annotations

from typing import Any

from agentrl_core.config import OptimConfig, TrainerConfig
from agentrl_core.training.backends.base import TrainBackend
from agentrl_core.training.backends.torch_backend import TorchBackend


def build_backend(trainer: TrainerConfig, model: Any, optim: OptimConfig, total_steps: int, *,
                  gradient_checkpointing: bool = False, tokenizer: Any = None) -> TrainBackend:
    """TorchBackend or DeepSpeedBackend over `model` with `optim`'s AdamW and schedule.

    Gradient checkpointing is switched on here for DeepSpeed (before the engine wraps the model);
    the torch path leaves it to the caller (`open_session` already does it when loading).
    """
    if trainer.backend == "torch":
        return TorchBackend.build(model, optim, total_steps, tokenizer=tokenizer)
    from agentrl_core.training.backends.deepspeed_backend import DeepSpeedBackend

    return DeepSpeedBackend(model, trainer.deepspeed, optim, total_steps,
                            gradient_checkpointing=gradient_checkpointing, tokenizer=tokenizer)
