"""Random-weight models at real sizes, and the FLOP and byte counts the figures divide by.

Throughput does not depend on the weights' values, so the speed figures use models built from a config
(no weights travel): SmolLM2-135M's shape (Llama) and Qwen2.5-0.5B's and -1.5B's (Qwen2: biased q/k/v,
tied 151,936-token embedding). The dry run uses 2-layer models of width 64 with the same code.

With N the parameters (the tied embedding/head matrix E = V·d counted once), L layers and Hd = heads·head_dim:
    forward FLOPs of one sequence = 2·(N − E)·len + 2·E·h + 4·L·Hd·len·(len+1)/2
        (the decoder's matmuls on every token; the head only on the h tokens it is applied to; the
        causal attention scores QKᵀ and the weighted sum AV over the keys each position sees)
    training FLOPs = 3 · forward FLOPs (the backward pass costs twice the forward)
    decode bytes per step = weight bytes in the engine's compute dtype + Σ_sequences context · KV bytes/token
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Shape:
    """A decoder-only model's size (everything a transformers config needs)."""

    name: str
    family: str  # "llama" or "qwen2"
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes_per_token(self, element_size: int) -> int:
        """Keys and values of every layer for one token: L · 2 · H_kv · head_dim · element size."""
        return self.layers * 2 * self.kv_heads * self.head_dim * element_size


SMOLLM2_135M = Shape("smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 100000.0)
QWEN2_05B = Shape("qwen2.5-0.5b", "qwen2", 151936, 896, 4864, 24, 14, 2, 1_000_000.0)
QWEN2_15B = Shape("qwen2.5-1.5b", "qwen2", 151936, 1536, 8960, 28, 12, 2, 1_000_000.0)
TINY_LLAMA = Shape("tiny-llama", "llama", 49152, 64, 128, 2, 4, 2)
TINY_QWEN2 = Shape("tiny-qwen2", "qwen2", 49152, 64, 128, 2, 4, 2)
TINY_QWEN2_WIDE = Shape("tiny-qwen2-wide", "qwen2", 49152, 96, 192, 2, 4, 2)


def config_of(shape: Shape, tokenizer: Any | None = None) -> Any:
    """The transformers config of `shape` (special token ids from `tokenizer` when given), SDPA attention."""
    from transformers import LlamaConfig, Qwen2Config

    ids = {}
    if tokenizer is not None:
        ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id}
    cls = LlamaConfig if shape.family == "llama" else Qwen2Config
    cfg = cls(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
              num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
              max_position_embeddings=8192, rope_theta=shape.rope_theta, tie_word_embeddings=True, **ids)
    cfg._attn_implementation = "sdpa"
    return cfg


def build_random(shape: Shape, device: torch.device, seed: int = 0, tokenizer: Any | None = None) -> Any:
    """A float32 model of `shape` with random weights, initialised directly on `device` (fast on a GPU)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config_of(shape, tokenizer), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.eval()


def save_random_folder(shape: Shape, out: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    """A model folder agentrl loads like any other: random weights of `shape`, the tokenizer of `tokenizer_dir`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    shape = replace(shape, vocab=max(shape.vocab, len(tok)))
    model = build_random(shape, torch.device("cpu"), seed, tok)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in tokenizer_dir.iterdir():
        if path.is_file():
            shutil.copy2(path, out / path.name)
    return out


def param_counts(model: Any) -> tuple[int, int]:
    """(N, E): all parameters, a tied matrix counted once, and the output head's V·d."""
    n = sum(p.numel() for p in model.parameters())
    return n, model.get_output_embeddings().weight.numel()


def forward_flops(shape: Shape, n: int, e: int, length: int, head_tokens: int) -> float:
    """2·(N − E)·len + 2·E·h + 4·L·Hd·len(len+1)/2 for one sequence (see the module docstring)."""
    attention = 4.0 * shape.layers * shape.heads * shape.head_dim * length * (length + 1) / 2
    return 2.0 * (n - e) * length + 2.0 * e * head_tokens + attention
