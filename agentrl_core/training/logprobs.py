"""Per-token log-probs (and entropy) computed only where the loss needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from agentrl_core.models import mixed_precision


@dataclass
class TokenStats:
    """Dense [B, L-1] tensors, zero where target_mask is 0."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor,
    *, temperature: float = 1.0, with_entropy: bool = False, chunk: int = 1024, autocast: str = "float32",
    prefixes: Sequence[Any] | None = None,
) -> TokenStats:
    """log softmax(z_t / T)[y_{t+1}] at the masked positions only.

    Runs the decoder once, then applies the output head to the hidden states of the model's
    own tokens (not prompt, observation or padding positions), in chunks: the full-vocabulary
    log-softmax over every position is what dominates memory otherwise. Entropy:
    H_t = logsumexp(z) - sum softmax(z) * z. With `prefixes` (shared_prefix.PrefixGroup per group of
    rows), the tokens each group's samples share run once (not with gradient checkpointing, which drops caches).
    """
    if is_wrapper(model):
        return _wrapped_logprobs(model, input_ids, attention_mask, target_mask, temperature=temperature,
                                 with_entropy=with_entropy, chunk=chunk, autocast=autocast)
    device = next(model.parameters()).device
    sel = target_mask.to(device).bool()
    if prefixes and any(g.length for g in prefixes) and isinstance(model, torch.nn.Module) and not _checkpointing(model):
        from agentrl_core.training.shared_prefix import shared_hidden_at

        h = shared_hidden_at(model, input_ids.to(device), attention_mask.to(device), sel, prefixes, autocast)
    else:
        with mixed_precision.autocast(model, autocast):
            hidden = model.base_model(input_ids=input_ids.to(device),
                                      attention_mask=attention_mask.to(device)).last_hidden_state
        h = hidden[:, :-1][sel]
    targets = input_ids[:, 1:].to(device)[sel]
    head = model.get_output_embeddings()

    def logits_of(start: int) -> torch.Tensor:
        with mixed_precision.autocast(model, autocast):
            return head(h[start:start + chunk])
    return _stats(sel, targets, h.shape[0], logits_of, temperature, with_entropy, chunk)


def _checkpointing(model: Any) -> bool:
    """Whether gradient checkpointing is on (transformers then refuses to build KV caches in training)."""
    return model.training and any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def is_wrapper(model: Any) -> bool:
    """True for a training wrapper whose own forward must run (a DeepSpeed engine, DDP): it holds
    the Hugging Face model as `.module`. Its forward does bookkeeping (ZeRO-3 resets its backward
    state per forward and hooks the outputs) that calling the inner model's parts would skip."""
    return isinstance(getattr(model, "module", None), torch.nn.Module)


def _wrapped_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor,
                      *, temperature: float, with_entropy: bool, chunk: int, autocast: str) -> TokenStats:
    """The same statistics through the wrapper's full forward.

    Hugging Face's `logits_to_keep` with a boolean [B, L] mask applies the head to the target
    positions only (flattened to [N, V], N = target tokens, row-major as `sel`), so no logits are
    made for prompt, observation or padding positions; unlike the bare-model path the N rows come
    out of one head call, not `chunk` at a time.
    """
    device = next(model.parameters()).device
    sel = target_mask.to(device).bool()
    keep = torch.nn.functional.pad(sel, (0, 1))  # [B, L]: hidden state t predicts y_{t+1}; the last predicts nothing
    with mixed_precision.autocast(model, autocast):
        out = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), logits_to_keep=keep,
                    use_cache=False)
    z = out.logits
    targets = input_ids[:, 1:].to(device)[sel]
    return _stats(sel, targets, z.shape[0], lambda start: z[start:start + chunk], temperature, with_entropy, chunk)


def _stats(sel: torch.Tensor, targets: torch.Tensor, n: int, logits_of: Any, temperature: float, with_entropy: bool,
           chunk: int) -> TokenStats:
    """log-prob of each target and (optionally) the entropy, from logits computed `chunk` rows at a time."""
    lp_parts, ent_parts = [], []
    for start in range(0, n, chunk):
        logits = logits_of(start).float() / temperature
        lse = torch.logsumexp(logits, dim=-1)
        lp_parts.append(logits.gather(-1, targets[start:start + chunk, None]).squeeze(-1) - lse)
        if with_entropy:
            ent_parts.append(lse - (torch.softmax(logits, dim=-1) * logits).sum(-1))
    dense = _scatter(sel, lp_parts)
    entropy = _scatter(sel, ent_parts) if with_entropy else None
    return TokenStats(dense, entropy)


def _scatter(sel: torch.Tensor, parts: list[torch.Tensor]) -> torch.Tensor:
    out = torch.zeros(sel.shape, dtype=torch.float32, device=sel.device)
    if parts:
        out = out.masked_scatter(sel, torch.cat(parts).float())
    return out
