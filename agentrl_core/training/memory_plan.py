"""The run's memory budget, and the sizes that follow from it: KV cache, micro-batches, checkpointing.

The budget B is `trainer.memory_gb` GiB, else AUTO_SHARE of what this process could hold when the
stage starts (its resident memory now plus what the machine, or its cgroup, has available). The
training process holds, all run long (bytes):

    S = R + P·b_w + 8·P_t + [P·b_w, a reference model for a KL term]

with R the resident memory before the model loads (runtime, libraries; measured after the heap's free pages
are handed back, `malloc_tuning.release_free_heap`, so an earlier stage's freed buffers are not in it), P the
parameters (P_t of them trained: all, or the LoRA adapters), b_w the bytes of `model.dtype`, 8 bytes per
trained parameter for AdamW's two float32 moments. Two phases follow each other and never overlap, since the
engine frees its KV caches and weight snapshot before each update (rollout.engine.sleep_when_training):

    rollout = P·b_c + 1.5·KV + E·N          (native engine: weight snapshot in the compute dtype b_c)
    update  = 4·P_t + [P·2 under bf16 autocast: its weight copies] + X + a·T

The KV cache counts 1.5 times: its slabs grow by doubling, and a slab of up to KV/2 is copied into
the new one of up to KV before it is freed. N is rollout.engine.max_step_tokens and E the bytes one
token of a packed forward step takes (measured: the rollout's peak above the held memory, the
snapshot and 1.5·KV, was 0.41 GiB at N = 2,048 with a 2 GiB cache). X = 3·CHUNK·V·4 is the output head's chunked logits (log-softmax and entropy over CHUNK positions
at a time, vocabulary V), T the tokens of one micro-batch and a the bytes per micro-batch token:

    a = f·K·L·(h + i)                + Q0·n·T_row     without gradient checkpointing,
    a = 4·L·h + f·K·(h + i)          + Q1·n·T_row     with it (each layer's input kept, one layer
                                                      recomputed at a time),

with L layers, hidden size h, MLP size i, n attention heads, T_row the longest row (attention's
scores of a row cost n·T_row² at a time, which is at most n·T_row per token of the micro-batch),
f = 1 under bf16 autocast and F32 in float32. K, Q0, Q1 and F32 were measured on SmolLM2-135M
(one row of 256 to 4,096 tokens, forward and backward as the update runs them, the growth of the
process's peak resident memory): 1.07 MiB per token plus 52 bytes per T_row² without
checkpointing, 138 bytes per T_row² with it, float32 1.39 times bf16. With a margin of MARGIN·B for
the allocator, the free room is F = (1 − MARGIN)·B − S, and

    KV = min(the configured or default cache, (F − P·b_c − E·N) / 1.5)
    T  = min(trainer.micro_batch_tokens, (F − update fixed part) / a)  ≥ the longest row

(a row is never split: the longest is rollout.max_context_tokens). When the longest row does not fit
without gradient checkpointing, checkpointing is turned on; when it does not fit with it either,
a run with `trainer.memory_gb` stops before loading anything with a ConfigError that names the budget
and what to lower, and a run without one warns and keeps the recipe's sizes.
The plan is printed at the start of the stage; every step logs `memory/peak_rss_gib` (the process's
peak so far) and a step whose peak crosses B logs a warning naming the budget.

On a Ray cluster the run starts itself (distributed.backend ray, no ray_address), the trainer and the W
rollout workers are processes of this machine that hold their memory at once, so the plan sums them
(`plan_concurrent`): each process has its own runtime R, each worker its own weights P·b_w, the object
store one published copy P·b_w, and

    held  = (1 + W)·R + P·b_w·(2 + W) + 8·P_t + [P·b_w]
    peak  = held + W·(P·b_c + E·N + 1.5·KV) + update fixed part + a·T

KV = min(the configured cache, (F − W·(P·b_c + E·N) − update fixed part − a·T_row) / (1.5·W)), so one
longest row always trains, and T takes what the caches leave. On a cluster given by ray_address the
nodes' memory is not this machine's: no plan is made there. The driver logs, every step,
`memory/run_peak_gib` = the trainer's peak + W × the largest worker peak (an upper bound) and warns
when it crosses the budget.

A budget from available memory changes with what else runs on the machine, and with it KV and T
(and so the last bits of a run); set `trainer.memory_gb` for runs that repeat bit for bit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl_core.errors import ConfigError
from agentrl_core.system.machine_info import available_bytes, peak_resident_bytes, resident_bytes
from agentrl_core.system.malloc_tuning import release_free_heap

log = logging.getLogger(__name__)

GIB = 2**30
MIB = 2**20
AUTO_SHARE = 0.8
"""Share of the memory this process could hold at the start that an unset budget takes."""
MARGIN = 0.1
"""Share of the budget left to the allocator (fragmentation, temporaries)."""
CHUNK = 1024
"""Positions the output head scores at a time (training.logprobs.token_logprobs' chunk)."""
K = 18.0
"""Activation bytes per token, per layer, per unit of h + i, under bf16 autocast (measured)."""
Q0 = 6.0
"""Attention-score bytes per head per T_row² without gradient checkpointing (measured)."""
Q1 = 16.0
"""Attention-score bytes per head per T_row² with gradient checkpointing (measured)."""
F32 = 1.4
"""Activations in float32 over bf16 (measured)."""
MIN_KV_MB = 64
KV_GROWTH = 1.5
"""The KV cache's transient peak over its budget while a slab grows (old and new slab both alive)."""
E_STEP = 256 * 1024
"""Bytes per token of one packed engine forward step (measured, rounded up)."""


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs to know of a model: parameters and the sizes activations scale with."""

    params: int
    trainable: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    heads: int

    @classmethod
    def of(cls, model_dir: Path, lora_trainable: int | None = None) -> ModelShape:
        """From a model folder's config, counting parameters on the meta device (nothing is allocated)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        text = getattr(config, "text_config", config)
        return cls(params, lora_trainable if lora_trainable is not None else params, text.num_hidden_layers,
                   text.hidden_size, getattr(text, "intermediate_size", 4 * text.hidden_size), text.vocab_size,
                   text.num_attention_heads)


@dataclass(frozen=True)
class MemoryPlan:
    """The budget and the sizes chosen under it (bytes, tokens)."""

    budget: int
    source: str
    persistent: int
    rollout_fixed: int
    update_fixed: int
    kv_cache_mb: int
    micro_batch_tokens: int
    gradient_checkpointing: bool
    bytes_per_token: int
    rollout_workers: int = 0
    """0: rollout and update alternate in one process; W >= 1: W rollout worker processes beside the trainer."""

    @property
    def peak(self) -> int:
        """The planned peak (bytes): the larger phase, or (rollout workers) both sides at once."""
        update = self.update_fixed + self.bytes_per_token * self.micro_batch_tokens
        caches = int(KV_GROWTH * self.kv_cache_mb * MIB) * max(1, self.rollout_workers)
        if self.rollout_workers:
            return self.persistent + self.rollout_fixed + caches + update
        return self.persistent + max(self.rollout_fixed + caches, update)

    def describe(self) -> str:
        """One line for the log: the budget, where it came from, and what it sized."""
        peak = self.peak
        who = f" ({self.rollout_workers} rollout workers and the trainer at once)" if self.rollout_workers else ""
        each = " each" if self.rollout_workers else ""
        return (f"memory budget {self.budget / GIB:.2f} GiB ({self.source}): held all run {self.persistent / GIB:.2f} "
                f"GiB{who}; rollout KV cache {self.kv_cache_mb} MiB{each}; update micro-batches of "
                f"{self.micro_batch_tokens} tokens ({self.bytes_per_token / 1024:.0f} KiB each), gradient "
                f"checkpointing {'on' if self.gradient_checkpointing else 'off'}; planned peak {peak / GIB:.2f} GiB")


def activation_bytes(shape: ModelShape, checkpointing: bool, longest_row: int, bf16: bool) -> int:
    """a, the bytes per micro-batch token of the update (module docstring)."""
    layer = (1.0 if bf16 else F32) * K * (shape.hidden + shape.intermediate)
    if checkpointing:
        return int(4 * shape.layers * shape.hidden + layer + Q1 * shape.heads * longest_row)
    return int(shape.layers * layer + Q0 * shape.heads * longest_row)


def update_fixed_bytes(shape: ModelShape, compute_bf16: bool) -> int:
    """The update's part that does not grow with its tokens: 4·P_t (gradients) + [P·2, the bf16 weight copies
    under autocast] + X (the output head's chunked logits, 3·CHUNK·V·4)."""
    return 4 * shape.trainable + (2 * shape.params if compute_bf16 else 0) + 3 * CHUNK * shape.vocab * 4


def plan_memory(shape: ModelShape, *, budget: int, source: str, resident: int, weight_bytes: int,
                compute_bf16: bool, reference: bool, native_engine: bool, kv_cache_mb: int,
                micro_batch_tokens: int, longest_row: int, checkpointing: bool,
                step_tokens: int = 2048) -> MemoryPlan:
    """Size the KV cache and micro-batches under `budget` (module docstring); ConfigError if nothing fits."""
    compute = 2 if compute_bf16 else weight_bytes
    persistent = resident + shape.params * weight_bytes + 8 * shape.trainable
    persistent += shape.params * weight_bytes if reference else 0
    free = int((1 - MARGIN) * budget) - persistent
    rollout_fixed = shape.params * compute + E_STEP * step_tokens if native_engine else 0
    update_fixed = update_fixed_bytes(shape, compute_bf16)
    kv = min(kv_cache_mb, int((free - rollout_fixed) / KV_GROWTH) // MIB)
    if kv < MIN_KV_MB:
        raise _too_small(budget, source, persistent + rollout_fixed + int(KV_GROWTH * MIN_KV_MB * MIB), "the rollout")
    for ckpt in ([checkpointing] if checkpointing else [False, True]):
        per_token = activation_bytes(shape, ckpt, longest_row, compute_bf16)
        room = (free - update_fixed) // per_token
        if room >= longest_row:
            return MemoryPlan(budget, source, persistent, rollout_fixed, update_fixed, int(kv),
                              int(min(micro_batch_tokens, room)), ckpt, per_token)
    need = persistent + update_fixed + activation_bytes(shape, True, longest_row, compute_bf16) * longest_row
    raise _too_small(budget, source, need, f"an update of one {longest_row}-token row")


def plan_concurrent(shape: ModelShape, *, workers: int, budget: int, source: str, resident: int, weight_bytes: int,
                    compute_bf16: bool, reference: bool, kv_cache_mb: int, micro_batch_tokens: int,
                    longest_row: int, checkpointing: bool, step_tokens: int = 2048) -> MemoryPlan:
    """Size each rollout worker's KV cache and the trainer's micro-batches when W = `workers` worker processes
    and the trainer hold their memory at once on this machine (module docstring); ConfigError if nothing fits."""
    compute = 2 if compute_bf16 else weight_bytes
    weights = shape.params * weight_bytes
    persistent = (1 + workers) * resident + weights * (2 + workers) + 8 * shape.trainable
    persistent += weights if reference else 0
    free = int((1 - MARGIN) * budget) - persistent
    rollout_fixed = workers * (shape.params * compute + E_STEP * step_tokens)
    update_fixed = update_fixed_bytes(shape, compute_bf16)
    for ckpt in ([checkpointing] if checkpointing else [False, True]):
        per_token = activation_bytes(shape, ckpt, longest_row, compute_bf16)
        room = free - rollout_fixed - update_fixed - per_token * longest_row
        kv = min(kv_cache_mb, int(room / (KV_GROWTH * workers)) // MIB)
        if kv >= MIN_KV_MB:
            tokens = (free - rollout_fixed - update_fixed - int(KV_GROWTH * workers * kv * MIB)) // per_token
            return MemoryPlan(budget, source, persistent, rollout_fixed, update_fixed, int(kv),
                              int(min(micro_batch_tokens, tokens)), ckpt, per_token, workers)
    need = (persistent + rollout_fixed + update_fixed + int(KV_GROWTH * workers * MIN_KV_MB * MIB)
            + activation_bytes(shape, True, longest_row, compute_bf16) * longest_row)
    raise _too_small(budget, source, need, f"{workers} rollout workers beside an update of one {longest_row}-token row")


def _too_small(budget: int, source: str, need: int, what: str) -> ConfigError:
    return ConfigError(
        f"memory budget {budget / GIB:.2f} GiB ({source}) is too small for {what}: it needs about "
        f"{need / (1 - MARGIN) / GIB:.2f} GiB; raise trainer.memory_gb (or free memory), or lower "
        "rollout.max_context_tokens, or train LoRA adapters (model.lora.enabled)")


def budget_of(memory_gb: float | None) -> tuple[int, str] | None:
    """The budget in bytes and where it came from; None when it cannot be known (no /proc)."""
    if memory_gb is not None:
        return int(memory_gb * GIB), "trainer.memory_gb"
    available = available_bytes()
    if available is None:
        return None
    return int(AUTO_SHARE * (available + resident_bytes())), f"{AUTO_SHARE:.0%} of the memory available at start"


def memory_plan_for(cfg: Any, init_model: Path, *, native_engine: bool, rollout_workers: int = 0
                    ) -> MemoryPlan | None:
    """The plan of a GRPO stage on CPU with the torch backend (None elsewhere: GPU, DeepSpeed, no /proc);
    `rollout_workers` W >= 1: the Ray run's W worker processes and its trainer at once (plan_concurrent)."""
    import torch

    if cfg.trainer.backend != "torch" or torch.cuda.is_available():
        return None
    release_free_heap()  # what an earlier stage in this process freed is not this stage's resident memory
    budget = budget_of(cfg.trainer.memory_gb)
    if budget is None:
        return None
    lora = cfg.model.lora.enabled
    shape = ModelShape.of(init_model, lora_trainable=0 if lora else None)
    try:
        return _plan_for(cfg, shape, budget, lora, native_engine, rollout_workers)
    except ConfigError as err:
        if cfg.trainer.memory_gb is not None:
            raise
        log.warning("%s. The budget was not set (trainer.memory_gb), so the run goes on with the recipe's "
                    "sizes; set it to have them fitted to a budget", err)
        return None


def _plan_for(cfg: Any, shape: ModelShape, budget: tuple[int, str], lora: bool, native_engine: bool,
              rollout_workers: int) -> MemoryPlan:
    from agentrl_core.rollout.native.engine import default_kv_cache_mb

    algorithm = cfg.algorithm
    common = dict(
        budget=budget[0], source=budget[1], resident=resident_bytes(),
        weight_bytes=4 if cfg.model.dtype == "float32" else 2, compute_bf16=cfg.model.compute_dtype == "bfloat16",
        reference=(algorithm.kl_coef > 0 or algorithm.kl_reward_coef > 0) and not lora,
        kv_cache_mb=cfg.rollout.engine.kv_cache_mb or default_kv_cache_mb(),
        micro_batch_tokens=cfg.trainer.micro_batch_tokens, longest_row=cfg.rollout.max_context_tokens,
        checkpointing=cfg.model.gradient_checkpointing, step_tokens=cfg.rollout.engine.max_step_tokens)
    if rollout_workers:
        return plan_concurrent(shape, workers=rollout_workers, **common)
    return plan_memory(shape, native_engine=native_engine, **common)


def apply_plan(cfg: Any, plan: MemoryPlan) -> Any:
    """The recipe with the plan's KV cache, micro-batch tokens and gradient checkpointing."""
    return cfg.model_copy(update={
        "rollout": cfg.rollout.model_copy(update={
            "engine": cfg.rollout.engine.model_copy(update={"kv_cache_mb": plan.kv_cache_mb})}),
        "trainer": cfg.trainer.model_copy(update={"micro_batch_tokens": plan.micro_batch_tokens}),
        "model": cfg.model.model_copy(update={"gradient_checkpointing": plan.gradient_checkpointing}),
    })


def check_peak(plan: MemoryPlan | None, step: int) -> dict[str, float]:
    """`memory/peak_rss_gib`: the process's peak resident memory since the stage started (train_grpo restarts
    the peak there: machine_info.reset_peak_resident); a warning when the peak has crossed the budget."""
    peak = peak_resident_bytes()
    if plan is not None and peak > plan.budget:
        log.warning("step %d: peak resident memory %.2f GiB is over the memory budget %.2f GiB (%s); lower "
                    "trainer.micro_batch_tokens or rollout.engine.kv_cache_mb, or raise trainer.memory_gb",
                    step, peak / GIB, plan.budget / GIB, plan.source)
    return {"memory/peak_rss_gib": peak / GIB} if peak else {}


def check_run_peak(plan: MemoryPlan | None, step: int, metrics: dict[str, float]) -> dict[str, float]:
    """`memory/run_peak_gib` of a run with rollout workers: the trainer's peak + W × the largest worker peak
    (from the step's `memory/peak_rss_gib` and `memory/rollout_peak_rss_gib`), an upper bound of what the
    processes held at once; a warning when it has crossed the budget. {} without a concurrent plan."""
    if plan is None or not plan.rollout_workers:
        return {}
    total = (metrics.get("memory/peak_rss_gib", 0.0)
             + plan.rollout_workers * metrics.get("memory/rollout_peak_rss_gib", 0.0)) * GIB
    if total > plan.budget:
        log.warning("step %d: the trainer's and %d rollout workers' peaks add up to %.2f GiB, over the memory "
                    "budget %.2f GiB (%s); lower rollout.engine.kv_cache_mb or trainer.micro_batch_tokens, use fewer "
                    "distributed.rollout_workers, or raise trainer.memory_gb",
                    step, plan.rollout_workers, total / GIB, plan.budget / GIB, plan.source)
    return {"memory/run_peak_gib": total / GIB}
