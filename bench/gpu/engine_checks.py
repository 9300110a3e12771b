"""The native engine on the GPU: greedy output token-identical to HF `generate` in fp32, and its KV budget.

Greedy identity is checked in fp32 with TF32 off (a TF32 matmul rounds to 10 mantissa bits, which moves
near-tied logits). Each prompt runs alone through HF `generate` (no padding) and all together through the
engine (packed, continuous batching); the replies must be equal token for token. Where they are not, the
first differing position's HF top-1 − top-2 logit margin is reported: a margin near 1e-5 is a tie that
rounding decides (possible with random weights), a large one is a bug.

KV budget: the engine's default budget is sized from host memory (`default_kv_cache_mb`: a quarter of
MemAvailable, at most 2 GiB). From GPU memory it would be a quarter of the card's free memory:
    tokens = free/4 // (L · 2 · H_kv · head_dim · element size)
The check builds an engine with that budget and decodes a wide batch in it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from bench.gpu.device import free_memory_bytes, timed
from bench.gpu.record import Figures


@contextmanager
def strict_fp32() -> Iterator[None]:
    """fp32 matmuls at full precision (no TF32) inside the block, torch's setting restored after."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def hf_greedy(model: Any, prompt: list[int], new_tokens: int, eos_id: int, pad_id: int) -> list[int]:
    """HF `generate`'s greedy reply to one unpadded prompt, up to and including eos."""
    ids = torch.tensor([prompt], device=model.device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, eos_token_id=eos_id, pad_token_id=pad_id)
    reply = out[0, len(prompt):].tolist()
    return reply[: reply.index(eos_id) + 1] if eos_id in reply else reply


def top2_margin(model: Any, context: list[int]) -> float:
    """HF's top-1 minus top-2 logit after `context` (how close a greedy choice there was to a tie)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context], device=model.device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def greedy_identity(figs: Figures, tag: str, model: Any, tokenizer: Any, prompts: list[list[int]],
                    new_tokens: int) -> int:
    """Compare the native engine's greedy replies with HF generate's in fp32; record and return the matches."""
    from agentrl_core.config import SamplingConfig
    from agentrl_core.rollout.native import NativeEngine

    with strict_fp32():
        model = model.float().eval()
        engine = NativeEngine(model, tokenizer, autocast="float32", kv_cache_mb=512)
        gens = engine.generate(prompts, SamplingConfig(temperature=0.0, max_new_tokens=new_tokens), seed=0)
        eos, pad = int(tokenizer.eos_token_id), int(engine.pad_id)
        matches, margins = 0, []
        for prompt, gen in zip(prompts, gens):
            ref = hf_greedy(model, prompt, new_tokens, eos, pad)
            if ref == list(gen.token_ids):
                matches += 1
                continue
            k = next((i for i, (a, b) in enumerate(zip(ref, gen.token_ids)) if a != b),
                     min(len(ref), len(gen.token_ids)))
            margins.append(top2_margin(model, prompt + ref[:k]))
    note = f"{len(prompts)} prompts x {new_tokens} greedy tokens, fp32, TF32 off"
    if margins:
        note += f"; HF top1-top2 margin at the first difference: {', '.join(f'{m:.2e}' for m in margins)}"
    figs.add(f"{tag}/greedy_identical_to_hf", matches, unit=f"of {len(prompts)}", target=(">=", len(prompts)),
             note=note)
    return matches


def random_token_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """`n` prompts of random ids, 16 to 64 tokens long (different lengths exercise the packed forward)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(16, 64))] for _ in range(n)]


def kv_budget(figs: Figures, model: Any, tokenizer: Any, device: torch.device, wide_batch: int, prompt_len: int,
              new_tokens: int) -> None:
    """The KV budget from the card's free memory, and a wide decode inside it (bf16 cache, as on the GPU)."""
    from agentrl_core.config import SamplingConfig
    from agentrl_core.rollout.native import NativeEngine
    from agentrl_core.rollout.native.engine import default_kv_cache_mb

    free = free_memory_bytes(device)
    budget_mb = free / 4 / 2**20
    engine = NativeEngine(model, tokenizer, autocast="bfloat16", kv_cache_mb=budget_mb)
    per_token = engine.cache.bytes_per_token
    figs.add("kv/free_memory_gib", round(free / 2**30, 2), unit="GiB")
    figs.add("kv/budget_from_gpu_mib", round(budget_mb), unit="MiB", note="a quarter of the free GPU memory")
    figs.add("kv/tokens_in_budget", int(budget_mb * 2**20 // per_token), unit="tokens",
             note=f"{per_token} bytes per token (bf16 K and V, every layer)")
    figs.add("kv/engine_default_mib", default_kv_cache_mb(), unit="MiB",
             note="what make_engine gives without rollout.engine.kv_cache_mb: sized from host RAM, not the GPU")
    rng = random.Random(1)
    prompts = [[rng.randrange(3, len(tokenizer)) for _ in range(prompt_len)] for _ in range(wide_batch)]
    gens, seconds = timed(lambda: engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=new_tokens),
                                                  seed=0), device)
    stats = engine.stats()
    figs.add("kv/wide_batch_tokens_per_s", round(sum(len(g.token_ids) for g in gens) / seconds, 1), unit="tok/s",
             note=f"{wide_batch} sequences x ({prompt_len} + {new_tokens}) tokens in the GPU-sized budget; "
                  f"slabs {stats['kv_cache_mb']:.0f} MiB, evictions {stats.get('evictions', 0):.0f}")
    engine.sleep()
