"""Token sampling for the native engine: temperature, top-k, top-p, each row with its own generator.

The semantics are those of transformers' `generate` (and so of HFEngine): the logits z are
divided by the temperature T, then top-k keeps the k largest, then top-p keeps the smallest set
of tokens whose probability mass exceeds p (the most likely token always stays); T = 0 is greedy
(argmax). The log-prob recorded for the chosen token y is log softmax(z / T)[y] of the raw
logits (T = 1 when greedy), the quantity the trainer recomputes, so their ratio is 1 up to numerics.

Each row draws from its own torch.Generator, so a sequence's sample does not depend on which
other sequences share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How one sequence samples: temperature (0 = greedy), top_k (0 = off), top_p (1 = off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """[R, V] logits after temperature, top-k and top-p (filtered entries are −inf)."""
    scores = logits / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False, dim=-1)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1.0 - params.top_p)
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def sample_rows(logits: torch.Tensor, params: Sequence[SamplingParams],
                generators: Sequence[torch.Generator | None]) -> tuple[list[int], list[float]]:
    """(token, log-prob) of each row of `logits` [R, V] under its own params and generator.

    Sampled rows draw by inverting the CDF of their filtered distribution: one uniform u_r from the
    row's own generator, y_r = min{i : cdf_r[i] > u_r · cdf_r[V−1]} (cumulated in float64); rows
    sharing their settings are filtered together, so a step costs a few vectorised ops, not one
    multinomial per row.
    """
    logits = logits.float()
    tokens = torch.argmax(logits, dim=-1)
    by_setting: dict[SamplingParams, list[int]] = {}
    for r, p in enumerate(params):
        if p.temperature > 0:
            by_setting.setdefault(p, []).append(r)
    for setting, rows in by_setting.items():
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        probs = torch.softmax(filter_logits(logits.index_select(0, index), setting), dim=-1)
        u = torch.cat([torch.rand(1, generator=generators[r], dtype=torch.float64, device=logits.device)
                       for r in rows])
        cdf = probs.double().cumsum(dim=-1)
        picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
        tokens[index] = picked.clamp(max=logits.shape[-1] - 1)
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], dtype=torch.float32,
                         device=logits.device)
    chosen = torch.log_softmax(logits / temps[:, None], dim=-1).gather(-1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen.tolist()
