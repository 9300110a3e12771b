"""The packed decoder forward: many sequences' new tokens in one pass over a Llama-family model, KV in a slab.

One step feeds N tokens from several sequences at once, with no padding: every linear layer runs
on an [N, d] matrix. Attention is the only part that needs per-sequence structure:

- decode rows (one new token of a sequence whose earlier tokens are cached) attend together in
  one SDPA call over the slab rows they occupy, masked to each row's length. The query heads of
  one KV head are folded into the query-length dimension ([S, H_kv, g, D] against [S, H_kv, T, D]),
  so grouped-query attention needs no copy of K/V;
- prefill chunks (n new tokens after c cached ones) attend per sequence with the causal mask
  j <= c + i over positions [0, c + n).

Logits are computed only for the rows that sample a token (the last token of each segment that
asks for them), so the [N, vocab] matrix of a full forward never exists.

The layers are the model's own modules (norms, projections, MLP, rotary embedding), so LoRA
adapters injected by peft and DeepSpeed's parameter hooks keep working. Supported: the Llama
family as transformers implements it (llama, mistral without a sliding window, qwen2, qwen3 with
its q/k norms); `native_support` says why another model is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from agentrl_core.models import mixed_precision
from agentrl_core.rollout.native.compute_weights import DecoderWeights, LayerWeights, snapshot
from agentrl_core.rollout.native.kv_cache import SlabKVCache

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
"""model_type values whose decoder layers the packed forward knows."""


@dataclass(frozen=True)
class Segment:
    """New tokens of one sequence in a step: they occupy positions [start, start + len(tokens)) of `slot`."""

    slot: int
    start: int
    tokens: Sequence[int]
    wants_logits: bool


def native_support(model: Any) -> str | None:
    """None if the packed forward can run `model`; else why not (for the log and the error)."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"model_type {kind!r} is not one of {', '.join(SUPPORTED_TYPES)}"
    if getattr(config, "use_sliding_window", False) or (kind == "mistral" and getattr(config, "sliding_window", None)):
        return f"{kind} with a sliding attention window is not supported"
    inner = getattr(model, "model", None)
    if not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return "the model has no embed_tokens/layers/norm/rotary_emb (not a transformers decoder-only model)"
    return None


class PackedForward:
    """Runs segments of several sequences through the model, reading and writing `cache`."""

    def __init__(self, model: Any, cache: SlabKVCache, autocast: str = "float32") -> None:
        why = native_support(model)
        if why is not None:
            raise ValueError(f"the native engine cannot run this model: {why}")
        self.model, self.cache, self.autocast = model, cache, autocast
        self.weights: DecoderWeights | None = None
        self._stale = True  # the snapshot is taken at the first forward (and again after release())
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.group = self.heads // self.kv_heads
        self.scale = self.head_dim ** -0.5
        self.qk_norm = cfg.model_type == "qwen3"

    def refresh(self) -> None:
        """Take the model's current weights (after an update): a compute-dtype snapshot where every module
        is plain, else none (the modules are called under autocast)."""
        self.weights = None
        self.weights = snapshot(self.model, torch.bfloat16 if self.autocast == "bfloat16" else self._param_dtype())
        self._stale = False

    def release(self) -> None:
        """Drop the weight snapshot (its memory) until the next forward takes a fresh one."""
        self.weights, self._stale = None, True

    def _param_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @torch.no_grad()
    def __call__(self, segments: Sequence[Segment]) -> torch.Tensor:
        """Logits [R, vocab] (float32) of the last token of each segment with wants_logits, in order."""
        if self._stale:
            self.refresh()
        if self.weights is not None:
            return self._forward(segments)
        with mixed_precision.autocast(self.model, self.autocast):
            return self._forward(segments)

    def _forward(self, segments: Sequence[Segment]) -> torch.Tensor:
        inner = self.model.model
        device = self.cache.device
        ids = torch.tensor([t for s in segments for t in s.tokens], dtype=torch.long, device=device)
        slots = torch.tensor([s.slot for s in segments for _ in s.tokens], dtype=torch.long, device=device)
        pos = torch.tensor([s.start + i for s in segments for i in range(len(s.tokens))], dtype=torch.long,
                           device=device)
        plan = _AttentionPlan.build(segments, device)
        x = inner.embed_tokens(ids)
        cos, sin = inner.rotary_emb(x, pos[None])
        cos, sin = cos[0, :, None, :], sin[0, :, None, :]  # [N, 1, D]
        rows = torch.tensor(plan.logit_rows, dtype=torch.long, device=device)
        if self.weights is None:
            for index, layer in enumerate(inner.layers):
                x = self._layer(index, layer, x, cos, sin, slots, pos, plan)
            return self.model.lm_head(inner.norm(x.index_select(0, rows))).float()
        w = self.weights
        for index, layer in enumerate(w.layers):
            x = self._layer_weights(index, layer, x, cos, sin, slots, pos, plan)
        return w.head(w.norm(x.index_select(0, rows)).to(w.dtype)).float()

    def _layer_weights(self, index: int, w: LayerWeights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       slots: torch.Tensor, pos: torch.Tensor, plan: "_AttentionPlan") -> torch.Tensor:
        """One layer from the weight snapshot: float32 residual and norms, compute-dtype matmuls."""
        n, dtype = x.shape[0], self.weights.dtype
        h = w.input_norm(x).to(dtype)
        q = w.q(h).view(n, self.heads, self.head_dim)
        k = w.k(h).view(n, self.kv_heads, self.head_dim)
        v = w.v(h).view(n, self.kv_heads, self.head_dim)
        if w.q_norm is not None:
            q, k = w.q_norm(q), w.k_norm(k)
        q, k = torch.split(_rope(torch.cat((q, k), dim=1), cos, sin), (self.heads, self.kv_heads), dim=1)
        keys, values = self.cache.write(index, slots, pos, k, v)
        out = self._attend(q, keys, values, plan)
        x = x + w.o(out.reshape(n, self.heads * self.head_dim).to(dtype))
        h = w.post_norm(x).to(dtype)
        return x + w.down(w.act(w.gate(h)) * w.up(h))

    def _layer(self, index: int, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               slots: torch.Tensor, pos: torch.Tensor, plan: "_AttentionPlan") -> torch.Tensor:
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        n = h.shape[0]
        q = attn.q_proj(h).view(n, self.heads, self.head_dim)
        k = attn.k_proj(h).view(n, self.kv_heads, self.head_dim)
        v = attn.v_proj(h).view(n, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = torch.split(_rope(torch.cat((q, k), dim=1), cos, sin), (self.heads, self.kv_heads), dim=1)
        keys, values = self.cache.write(index, slots, pos, k, v)
        out = self._attend(q, keys, values, plan)
        x = x + attn.o_proj(out.reshape(n, self.heads * self.head_dim))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, plan: "_AttentionPlan") -> torch.Tensor:
        """Attention output [N, H, D] for every row: decode rows batched over the slab, prefill per sequence."""
        q = q.to(keys.dtype)
        if plan.dense_rows is not None and not plan.prefills and plan.dense_rows == slice(0, q.shape[0]):
            return self._attend_decode(q, keys, values, plan)  # a pure decode step
        out = torch.empty((q.shape[0], self.heads, self.head_dim), dtype=keys.dtype, device=q.device)
        if plan.decode_rows.numel():
            target = plan.decode_rows if plan.dense_rows is None else plan.dense_rows
            out[target] = self._attend_decode(q, keys, values, plan)
        for row, slot, start, n in plan.prefills:
            out[row:row + n] = self._attend_prefill(q[row:row + n], keys[slot], values[slot], start, n)
        return out

    def _attend_decode(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       plan: "_AttentionPlan") -> torch.Tensor:
        lo, hi, width = plan.decode_lo, plan.decode_hi, plan.decode_width
        rows = q[plan.decode_rows] if plan.dense_rows is None else q[plan.dense_rows]
        if plan.dense_slots:  # the decoding sequences fill slots lo..hi-1 in row order: no scatter, no gather
            folded = rows.view(hi - lo, self.kv_heads, self.group, self.head_dim)
        else:
            folded = torch.zeros((hi - lo, self.kv_heads, self.group, self.head_dim), dtype=q.dtype, device=q.device)
            folded[plan.decode_slots - lo] = rows.view(-1, self.kv_heads, self.group, self.head_dim)
        got = F.scaled_dot_product_attention(folded, keys[lo:hi, :, :width], values[lo:hi, :, :width],
                                             attn_mask=plan.mask, scale=self.scale)
        if not plan.dense_slots:
            got = got[plan.decode_slots - lo]
        return got.reshape(-1, self.heads, self.head_dim)

    def _attend_prefill(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int,
                        n: int) -> torch.Tensor:
        """q [n, H, D] at positions start..start+n-1 over keys/values [H_kv, T, D] of its slot.

        The g query heads of each KV head are folded into the query length ([H_kv, g·n, D], row
        j·n + i = head j of the group at position i), so grouped-query attention reads K/V as they are
        stored; row (j, i) sees positions 0..start+i.
        """
        total = start + n
        folded = q.view(n, self.kv_heads, self.group, self.head_dim).permute(1, 2, 0, 3)
        folded = folded.reshape(1, self.kv_heads, self.group * n, self.head_dim)
        k, v = keys[None, :, :total], values[None, :, :total]
        seen = start + torch.arange(n, device=q.device).repeat(self.group)
        mask = torch.arange(total, device=q.device)[None, :] <= seen[:, None]
        got = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask, scale=self.scale)
        return got[0].view(self.kv_heads, self.group, n, self.head_dim).permute(2, 0, 1, 3).reshape(
            n, self.heads, self.head_dim)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding x·cos + rotate_half(x)·sin, rotate_half(x) = (−x₂, x₁) over the halves of the head dim."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class _AttentionPlan:
    """Where each segment's rows are, split into batched decode rows and per-sequence prefills."""

    decode_rows: torch.Tensor
    decode_slots: torch.Tensor
    decode_lo: int
    decode_hi: int
    decode_width: int
    prefills: list[tuple[int, int, int, int]]
    logit_rows: list[int]
    mask: torch.Tensor | None
    """[hi-lo, 1, 1, width] bool: slot s sees positions < its length; slots in the range that are not
    decoding see position 0 only (their output is discarded, but a row that sees nothing gives NaN)."""
    dense_rows: slice | None
    """The decode rows as a slice when they are consecutive rows of the step (the usual case)."""
    dense_slots: bool
    """Whether decode row i is slot lo + i for every i (no scatter into, or gather from, the slot range)."""

    @classmethod
    def build(cls, segments: Sequence[Segment], device: torch.device) -> "_AttentionPlan":
        rows, slots, lengths, prefills, logit_rows = [], [], [], [], []
        row = 0
        for s in segments:
            n = len(s.tokens)
            if n == 1 and s.start > 0:
                rows.append(row)
                slots.append(s.slot)
                lengths.append(s.start + 1)
            else:
                prefills.append((row, s.slot, s.start, n))
            row += n
            if s.wants_logits:
                logit_rows.append(row - 1)
        as_long = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
        lo, hi = min(slots, default=0), max(slots, default=-1) + 1
        dense_rows = slice(rows[0], rows[-1] + 1) if rows and rows == list(range(rows[0], rows[-1] + 1)) else None
        dense_slots = slots == list(range(lo, hi))
        width = max(lengths, default=0)
        mask = None
        if slots:
            span = torch.ones(hi - lo, dtype=torch.long)
            span[torch.tensor(slots) - lo] = torch.tensor(lengths)
            mask = (torch.arange(width)[None, :] < span[:, None])[:, None, None, :].to(device)
        return cls(as_long(rows), as_long(slots), lo, hi, width, prefills, logit_rows, mask, dense_rows, dense_slots)
