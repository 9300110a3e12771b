"""Our DeepSpeedConfig + OptimConfig -> the DeepSpeed JSON config dict (ZeRO, offload, bf16, clipping)."""

from __future__ import annotations

from typing import Any

from agentrl_core.config import DeepSpeedConfig, OptimConfig


def zero_section(ds: DeepSpeedConfig) -> dict[str, Any]:
    """The `zero_optimization` block: stage, buckets, and the CPU offloads when asked for."""
    zero: dict[str, Any] = {
        "stage": ds.zero_stage,
        "overlap_comm": ds.overlap_comm,
        "contiguous_gradients": True,
        "reduce_bucket_size": ds.reduce_bucket_size,
    }
    if ds.zero_stage == 2:
        zero.update(allgather_partitions=True, allgather_bucket_size=ds.allgather_bucket_size,
                    reduce_scatter=True)
    else:
        zero.update(stage3_max_live_parameters=ds.stage3_max_live_parameters,
                    stage3_prefetch_bucket_size=ds.stage3_prefetch_bucket_size,
                    stage3_gather_16bit_weights_on_model_save=False)
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": ds.pin_memory}
    if ds.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": ds.pin_memory}
    return zero


def optimizer_section(optim: OptimConfig) -> dict[str, Any]:
    """AdamW for DeepSpeed to build itself (used with optimizer offload: it picks its CPU Adam)."""
    return {"type": "AdamW", "params": {"lr": optim.lr, "betas": list(optim.betas), "eps": 1e-8,
                                        "weight_decay": optim.weight_decay}}


def deepspeed_config(ds: DeepSpeedConfig, optim: OptimConfig, *, micro_batch_size: int = 1,
                     world_size: int = 1) -> dict[str, Any]:
    """The dict passed as `deepspeed.initialize(config=...)`.

    Gradient accumulation is ours, not DeepSpeed's: micro-batches are planned by token budget, so
    their count varies per step. `managed_gradient_accumulation: false` makes every `backward()`
    only accumulate and every `step()` the boundary (reduce, clip, update), with
    `gradient_accumulation_steps` 1 so DeepSpeed never divides the loss (ours is already
    normalised by the global batch). `train_micro_batch_size_per_gpu` is nominal (DeepSpeed's
    sample counters only); train_batch_size = micro_batch_size * world_size.
    Clipping: g <- g * min(1, gradient_clipping / ||g||_2), as torch's clip_grad_norm_.
    The optimizer block is present only with `offload_optimizer` (DeepSpeed then builds its CPU
    Adam); otherwise the backend passes torch's AdamW as the client optimizer.
    """
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "train_batch_size": micro_batch_size * world_size,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": optim.grad_clip,
        "zero_optimization": zero_section(ds),
        "bf16": {"enabled": ds.bf16},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if ds.offload_optimizer:
        config["optimizer"] = optimizer_section(optim)
    return config
