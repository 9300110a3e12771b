"""Sequence packing: several short trajectories in one row, with no attention across samples.

Method (works on CPU, any dtype, eager or SDPA attention): the samples of a pack are concatenated
padding-free, and the model gets
  * position_ids that restart at 0 at every sample start (rotary positions as if alone), and
  * a 4-D additive attention mask [P, 1, T, T] that is block-diagonal causal:
        mask[p, 0, i, j] = 0      if seg[p, i] == seg[p, j] >= 0 and j <= i
                         = min    otherwise (finfo(dtype).min; pad rows attend only to themselves)
transformers passes a ready 4-D mask to the attention kernels unchanged. Flash-attention's varlen
path (position_ids alone, cu_seqlens) would skip the T x T mask, but it needs a GPU; this module
refuses attention implementations that ignore a dense mask (flash / flex) instead of silently
letting samples see each other.

Rotary models (Llama, SmolLM2) score q·k by relative position only, so the reset position_ids
matter for absolute-position models and keep each sample's positions within the trained range;
the block mask is what keeps samples apart.

Targets: position t of a row scores token t+1, counted only when both are in the same sample
and the sample's loss_mask is 1 at t+1, so Σ packed NLL = Σ over samples of their own NLL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl_core.models import mixed_precision
from agentrl_core.rollout.trajectory import Trajectory

_DENSE_MASK_ATTN = ("eager", "sdpa")


@dataclass
class PackedBatch:
    """Packed rows. input_ids, position_ids, segment_ids: [P, T]; attention_mask: [P, 1, T, T];
    target_mask: [P, T-1] (position t scores token t+1). `index[p]` lists the trajectories of row p;
    segment_ids[p, t] is the position of its sample in `index[p]`, -1 on padding."""

    index: list[list[int]]
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    attention_mask: torch.Tensor
    target_mask: torch.Tensor

    @property
    def tokens(self) -> int:
        return int((self.segment_ids >= 0).sum())


def plan_packs(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """First-fit decreasing: group sequence indices so each group's total length <= budget.

    A sequence longer than the budget gets a pack of its own (it is never cut).
    """
    if token_budget <= 0:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    packs: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        slot = next((p for p, u in enumerate(used) if u + lengths[i] <= token_budget), None)
        if slot is None:
            packs.append([i])
            used.append(lengths[i])
        else:
            packs[slot].append(i)
            used[slot] += lengths[i]
    return packs


def block_causal_mask(segment_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[P, T] segment ids -> [P, 1, T, T] additive mask (0 = may attend, finfo.min = may not)."""
    t = segment_ids.shape[1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    allowed = same & causal & (segment_ids[:, :, None] >= 0)
    allowed |= torch.eye(t, dtype=torch.bool)  # pad rows: only themselves, so softmax stays finite
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def pack(trajs: Sequence[Trajectory], packs: Sequence[Sequence[int]], pad_id: int,
         dtype: torch.dtype = torch.float32) -> PackedBatch:
    """Concatenate the trajectories of each pack into one right-padded row (see module docstring)."""
    width = max(sum(len(trajs[i].token_ids) for i in p) for p in packs)
    n = len(packs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    pos = torch.zeros((n, width), dtype=torch.long)
    seg = torch.full((n, width), -1, dtype=torch.long)
    lmask = torch.zeros((n, width), dtype=torch.float32)
    for row, p in enumerate(packs):
        start = 0
        for s, i in enumerate(p):
            t = trajs[i]
            end = start + len(t.token_ids)
            ids[row, start:end] = torch.tensor(t.token_ids)
            pos[row, start:end] = torch.arange(end - start)
            seg[row, start:end] = s
            lmask[row, start:end] = torch.tensor(t.loss_mask, dtype=torch.float32)
            start = end
    same_next = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] >= 0)
    target = lmask[:, 1:] * same_next
    return PackedBatch([list(p) for p in packs], ids, pos, seg, block_causal_mask(seg, dtype), target)


def packed_logprobs(model: Any, batch: PackedBatch, *, autocast: str = "float32") -> torch.Tensor:
    """log π(y_{t+1} | same-sample prefix) at target positions: [P, T-1], zero elsewhere."""
    impl = getattr(model.config, "_attn_implementation", "eager")
    if impl not in _DENSE_MASK_ATTN:
        raise ValueError(f"packing needs an attention implementation that applies a dense 4-D mask "
                         f"({', '.join(_DENSE_MASK_ATTN)}), the model uses {impl!r}; load it with "
                         "attn_implementation='sdpa'")
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    mask = batch.attention_mask  # rebuilt in the model's dtype so `min` is that dtype's own minimum
    mask = (mask if mask.dtype == dtype else block_causal_mask(batch.segment_ids, dtype)).to(device)
    with mixed_precision.autocast(model, autocast):
        hidden = model.base_model(input_ids=batch.input_ids.to(device), attention_mask=mask,
                                  position_ids=batch.position_ids.to(device)).last_hidden_state
    sel = batch.target_mask.to(device).bool()
    h = hidden[:, :-1][sel]
    targets = batch.input_ids[:, 1:].to(device)[sel]
    with mixed_precision.autocast(model, autocast):
        logits = model.get_output_embeddings()(h)
    logits = logits.float()
    lp = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.zeros(sel.shape, dtype=torch.float32, device=device).masked_scatter(sel, lp)


def per_sample_nll(batch: PackedBatch, logprobs: torch.Tensor) -> dict[int, torch.Tensor]:
    """Σ_t −log π over each trajectory's own target tokens, keyed by trajectory index."""
    seg_t = batch.segment_ids[:, 1:].to(logprobs.device)
    out: dict[int, torch.Tensor] = {}
    for row, p in enumerate(batch.index):
        for s, i in enumerate(p):
            out[i] = -(logprobs[row] * (seg_t[row] == s)).sum()
    return out
