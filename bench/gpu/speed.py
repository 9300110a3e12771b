"""A GRPO step through agentrl's own parts at a real model size: the native engine rolls out, the trainer updates.

One step = rollout (`NativeEngine.generate`: `prompts` × `group` sequences of `prompt_len` random tokens,
sampled at T = 1 for `new_tokens`) + update (`policy_update`: GRPO advantages of random rewards, PPO-clip,
token-mean, AdamW through the TorchBackend; weights float32, bf16 autocast: the product's CUDA setting).
The first step warms up (allocations, kernel choice) and is not counted; figures are medians of the rest.

    decode tokens/s  = B·(R − 1) / (t(R new tokens) − t(1 new token))   (the same prompts, caches dropped
                       before each call: the difference is the decode steps alone, prefill cancels);
                       decode step = (t(R) − t(1)) / (R − 1)
    decode bound     = B / ((W + B·(P + R/2)·kv) / BW) tokens/s, W = the engine's weight bytes per step
                       (2·N in bf16), kv = KV bytes per token, BW measured by a copy in the same run;
                       decode_vs_bound = bound / measured (target: within 2x)
    MFU              = 3·Σ forward FLOPs (shapes.forward_flops) / t_update / peak   (target >= 40%)
    MFU_6N           = 6·N·(tokens trained) / t_update / peak  (the usual count: it charges the head on
                       every token, where agentrl applies it to the model's own tokens only)
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.gpu.device import peak_memory_gib, release, timed
from bench.gpu.record import Figures
from bench.gpu.shapes import Shape, build_random, forward_flops, param_counts


@dataclass(frozen=True)
class StepSize:
    prompts: int = 8
    group: int = 8
    prompt_len: int = 256
    new_tokens: int = 256
    micro_tokens: int = 16384
    """Token budget of one training micro-batch (trainer.micro_batch_tokens)."""
    steps: int = 3
    """GRPO steps, the first a warm-up."""

    @property
    def batch(self) -> int:
        return self.prompts * self.group


DRY_SIZE = StepSize(prompts=2, group=2, prompt_len=16, new_tokens=6, micro_tokens=256, steps=2)


@dataclass
class StepTimes:
    prefill_s: float
    rollout_s: float
    decode_tokens: int
    update_s: float
    forward_flops: float
    tokens: int


def random_prompts(size: StepSize, vocab: int, seed: int) -> list[list[int]]:
    """`prompts` random prompts, each repeated `group` times (a GRPO group shares its prompt)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab) for _ in range(size.prompt_len)] for _ in range(size.prompts)]
    return [p for p in prompts for _ in range(size.group)]


def trajectories(prompts: Sequence[list[int]], gens: Sequence[Any], group: int, seed: int) -> list[Any]:
    """One Trajectory per reply: prompt (no loss) + reply (loss, engine log-probs), a random reward."""
    from agentrl_core.rollout.trajectory import Trajectory

    rng = random.Random(seed)
    out = []
    for i, (prompt, gen) in enumerate(zip(prompts, gens)):
        t = Trajectory(task_id=i // group, env="synthetic", group=i // group, sample=i % group, prompt_len=len(prompt))
        t.append(list(prompt), trainable=False)
        t.append(list(gen.token_ids), trainable=True, logprobs=list(gen.logprobs))
        t.reward = rng.random()
        out.append(t)
    return out


def rollout(engine: Any, prompts: list[list[int]], new_tokens: int, seed: int,
            device: torch.device) -> tuple[list[Any], float, float]:
    """(replies, seconds with 1 new token, seconds with `new_tokens`): the engine's caches dropped before each;
    a first untimed 1-token call grows the KV slabs (after `sleep`), so neither timed call pays for that."""
    from agentrl_core.config import SamplingConfig

    one = SamplingConfig(temperature=1.0, max_new_tokens=1)
    for _ in range(2):
        engine.invalidate()
        _, t1 = timed(lambda: engine.generate(prompts, one, seed), device)
    engine.invalidate()
    gens, tr = timed(lambda: engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=new_tokens), seed),
                     device)
    return gens, t1, tr


def update_context(model: Any, size: StepSize, pad_id: int, compute: str) -> Any:
    """The trainer's context: AdamW + schedule (agentrl's build_optimizer), GRPO + PPO-clip + token-mean."""
    from agentrl_core.config import AlgorithmConfig, OptimConfig
    from agentrl_core.training.optim import build_optimizer
    from agentrl_core.training.policy_update import UpdateContext

    opt, sched = build_optimizer(model, OptimConfig(lr=1e-6), size.steps)
    return UpdateContext(model, opt, sched, AlgorithmConfig(), grad_clip=1.0, micro_batch_tokens=size.micro_tokens,
                         pad_id=pad_id, autocast=compute, shared_prefix=False)


def one_step(engine: Any, ctx: Any, shape: Shape, size: StepSize, counts: tuple[int, int], step: int,
             device: torch.device) -> StepTimes:
    """Roll out, then update on what was rolled out; the times and the work done."""
    from agentrl_core.training.policy_update import policy_update

    prompts = random_prompts(size, shape.vocab, seed=step)
    gens, t1, tr = rollout(engine, prompts, size.new_tokens, seed=step, device=device)
    trajs = trajectories(prompts, gens, size.group, seed=step)
    engine.sleep()  # as rollout.engine.sleep_when_training: the KV slabs and weight snapshot make room
    _, t_update = timed(lambda: policy_update(ctx, trajs), device)
    flops = sum(forward_flops(shape, *counts, len(t.token_ids), t.response_tokens) for t in trajs)
    return StepTimes(t1, tr, sum(max(0, len(g.token_ids) - 1) for g in gens), t_update, flops,
                     sum(len(t.token_ids) for t in trajs))


def decode_bound_tokens_per_s(shape: Shape, n_params: int, size: StepSize, bw_gbs: float, weight_bytes: int,
                              kv_bytes: int) -> float:
    """B / ((W·N + B·(P + R/2)·kv) / BW): every decode step reads the weights once and each sequence's KV."""
    kv_read = size.batch * (size.prompt_len + size.new_tokens / 2) * shape.kv_bytes_per_token(kv_bytes)
    per_step = weight_bytes * n_params + kv_read
    return size.batch / (per_step / (bw_gbs * 1e9))


def grpo_step_figures(figs: Figures, shape: Shape, size: StepSize, tokenizer: Any, device: torch.device,
                      peak_tflops: float, bw_gbs: float, *, targets: bool, compute: str = "bfloat16") -> None:
    """Measure `size.steps` GRPO steps of a random `shape` model and record its figures (prefixed by its name)."""
    from agentrl_core.rollout.native import NativeEngine

    release(device)
    model = build_random(shape, device, tokenizer=tokenizer)
    counts = param_counts(model)
    elem = 2 if compute == "bfloat16" else 4
    kv_mb = max(64.0, 2 * size.batch * (size.prompt_len + size.new_tokens) * shape.kv_bytes_per_token(elem) / 2**20)
    engine = NativeEngine(model, tokenizer, autocast=compute, kv_cache_mb=kv_mb)
    ctx = update_context(model, size, engine.pad_id, compute)
    rows = [one_step(engine, ctx, shape, size, counts, step, device) for step in range(size.steps)]
    measured = rows[1:] or rows
    med = lambda key: statistics.median(getattr(r, key) for r in measured)  # noqa: E731
    decode_tps = med("decode_tokens") / max(1e-9, med("rollout_s") - med("prefill_s"))
    bound_tps = decode_bound_tokens_per_s(shape, counts[0], size, bw_gbs, elem, elem)
    tag = shape.name
    figs.add(f"{tag}/params_m", round(counts[0] / 1e6, 1), unit="M")
    figs.add(f"{tag}/decode_tokens_per_s", round(decode_tps, 1), unit="tok/s",
             note=f"batch {size.batch}, prompt {size.prompt_len}, {size.new_tokens} new tokens, {compute}")
    figs.add(f"{tag}/decode_bound_tokens_per_s", round(bound_tps, 1), unit="tok/s")
    step_ms = 1000 * (med("rollout_s") - med("prefill_s")) / max(1, size.new_tokens - 1)
    figs.add(f"{tag}/decode_step_ms", round(step_ms, 2), unit="ms",
             note=f"the bound's step: {1000 * size.batch / bound_tps:.2f} ms")
    figs.add(f"{tag}/decode_vs_bound", round(bound_tps / max(decode_tps, 1e-9), 2), unit="x",
             target=("<=", 2.0) if targets else None, note="bound / measured; 1 = at the memory-bandwidth bound")
    update_s = med("update_s")
    figs.add(f"{tag}/train_tokens_per_s", round(med("tokens") / update_s, 1), unit="tok/s")
    figs.add(f"{tag}/mfu_train", round(3 * med("forward_flops") / update_s / (peak_tflops * 1e12), 4),
             target=(">=", 0.40) if targets else None, note="exact FLOPs (head on the model's tokens only)")
    figs.add(f"{tag}/mfu_train_6N", round(6 * counts[0] * med("tokens") / update_s / (peak_tflops * 1e12), 4))
    step_s = med("rollout_s") + update_s
    figs.add(f"{tag}/grpo_step_s", round(step_s, 3), unit="s", note=f"rollout share {med('rollout_s') / step_s:.2f}")
    figs.add(f"{tag}/peak_memory_gib", round(peak_memory_gib(device), 2), unit="GiB")
    del engine, ctx, model
    release(device)
