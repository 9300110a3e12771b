"""Per-token log-probs (and entropy) computed only where the loss needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentrl_core.models import precision


@dataclass
class TokenStats:
    """Dense [B, L-1] tensors, zero where target_mask is 0."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor,
    *, temperature: float = 1.0, with_entropy: bool = False, chunk: int = 1024, autocast: str = "float32",
) -> TokenStats:
    """log softmax(z_t / T)[y_{t+1}] at the masked positions only.

    Runs the decoder once, then applies the output head to the hidden states of the model's
    own tokens (not prompt, observation or padding positions), in chunks: the full-vocabulary
    log-softmax over every position is what dominates memory otherwise. Entropy:
    H_t = logsumexp(z) - sum softmax(z) * z.
    """
    device = next(model.parameters()).device
    with precision.autocast(model, autocast):
        hidden = model.base_model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).last_hidden_state
    sel = target_mask.to(device).bool()
    h = hidden[:, :-1][sel]
    targets = input_ids[:, 1:].to(device)[sel]
    head = model.get_output_embeddings()
    lp_parts, ent_parts = [], []
    for start in range(0, h.shape[0], chunk):
        with precision.autocast(model, autocast):
            logits = head(h[start:start + chunk])
        logits = logits.float() / temperature
        lse = torch.logsumexp(logits, dim=-1)
        lp_parts.append(logits.gather(-1, targets[start:start + chunk, None]).squeeze(-1) - lse)
        if with_entropy:
            ent_parts.append(lse - (torch.softmax(logits, dim=-1) * logits).sum(-1))
    dense = _scatter(sel, lp_parts, hidden.dtype)
    entropy = _scatter(sel, ent_parts, hidden.dtype) if with_entropy else None
    return TokenStats(dense, entropy)


def _scatter(sel: torch.Tensor, parts: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros(sel.shape, dtype=torch.float32, device=sel.device)
    if parts:
        out = out.masked_scatter(sel, torch.cat(parts).float())
    return out
