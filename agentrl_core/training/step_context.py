"""What a GRPO update needs from a session and a recipe: the update context, its temperature, the KL reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl_core.config import RecipeConfig
from agentrl_core.models import load_model
from agentrl_core.training.data_parallel import rank_and_world
from agentrl_core.training.policy_update import UpdateContext
from agentrl_core.training.session import TrainingSession


def update_context(session: TrainingSession, cfg: RecipeConfig, pad_id: int, ref_model: Any | None) -> UpdateContext:
    """The policy update's context for a session (its forward model and backend) and the recipe."""
    rank, world = rank_and_world()  # one of several trainer workers: its share of each update
    return UpdateContext(session.forward_model, session.optimizer, session.scheduler, cfg.algorithm,
                         cfg.trainer.optim.grad_clip, cfg.trainer.micro_batch_tokens, pad_id, train_temperature(cfg),
                         ref_model, cfg.model.compute_dtype, cfg.rollout.sampling.max_new_tokens,
                         backend=session.backend, old_logprobs=cfg.trainer.old_logprobs,
                         shared_prefix=cfg.trainer.shared_prefix, dp_rank=rank, dp_world=world)


def train_temperature(cfg: RecipeConfig) -> float:
    """The temperature the trainer divides logits by: the rollout's (1 when it samples greedily)."""
    t = cfg.rollout.sampling.temperature
    return t if t > 0 else 1.0


def reference_model(cfg: RecipeConfig, init_model: Path, session: TrainingSession | None = None) -> Any | None:
    """π_ref of the KL terms: the stage's starting model, or None when no KL term is on.

    A LoRA session's base is `init_model` itself, so its reference is the same model with the
    adapters switched off (peft's `disable_adapter()`), which costs no second copy; otherwise
    (or when no session is given) a frozen copy of `init_model` is loaded, on the session model's device.
    """
    if cfg.algorithm.kl_coef <= 0 and cfg.algorithm.kl_reward_coef <= 0:
        return None
    if session is not None and session.adapter is not None:
        from agentrl_core.models.lora import adapters_off

        return adapters_off(session.adapter)
    device = str(next(session.model.parameters()).device) if session is not None else "cpu"
    ref = load_model(init_model, dtype=cfg.model.dtype, device=device)
    ref.requires_grad_(False)
    return ref.eval()
