"""The training forward with each group's shared prompt computed once, not once per sample.

The G samples of a GRPO group start with the same prompt (system message and first
observation). The plain forward runs every token of every sample; here the common prefix of P
tokens runs once (batch 1, keeping its keys and values), and the G continuations attend to those
keys and values expanded over the batch — a view, no copy. Autograd sums the continuations'
gradients into the one prefix pass, so loss and gradients equal the plain forward's up to float
rounding (a test checks this), at (G − 1)·P fewer tokens of forward and backward work per group.

P never covers a target: the prefix ends before the first position whose next token is the
model's, so every log-prob still comes from a continuation row. Row groups, prefix lengths and
the token counts saved are planned once per micro-batch (`plan_prefixes`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from agentrl_core.models import mixed_precision
from agentrl_core.rollout.trajectory import Trajectory

MIN_SHARED = 16
"""Shorter common prefixes are not worth a separate pass."""


@dataclass(frozen=True)
class PrefixGroup:
    """Rows of a micro-batch that share their first `length` tokens (no target among them)."""

    rows: tuple[int, ...]
    length: int

    @property
    def saved_tokens(self) -> int:
        return (len(self.rows) - 1) * self.length


def _first_target(t: Trajectory) -> int:
    """The last position that may belong to a prefix: the one before the first model token's predictor."""
    for i, m in enumerate(t.loss_mask):
        if m:
            return max(0, i - 1)
    return len(t.token_ids)


def _common_length(seqs: Sequence[list[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != first[i] for s in seqs[1:]):
            return i
    return n


def plan_prefixes(trajs: Sequence[Trajectory], index: Sequence[int]) -> list[PrefixGroup]:
    """The micro-batch `index`'s rows grouped by GRPO group, each with its shared, target-free prefix
    length; groups of one, or sharing fewer than MIN_SHARED tokens, get length 0 (plain rows)."""
    by_group: dict[int, list[int]] = {}
    for row, i in enumerate(index):
        by_group.setdefault(trajs[i].group, []).append(row)
    out = []
    for rows in by_group.values():
        members = [trajs[index[r]] for r in rows]
        length = min(_common_length([t.token_ids for t in members]), *(_first_target(t) for t in members))
        out.append(PrefixGroup(tuple(rows), length if len(rows) > 1 and length >= MIN_SHARED else 0))
    return out


def plan_group_batches(trajs: Sequence[Trajectory], token_budget: int) -> list[list[int]]:
    """Micro-batches that keep each GRPO group together (so its prompt can be shared), under the budget.

    A group costs its padded continuations plus one prefix: P + G·(longest − P), P = the group's shared
    prefix. Groups are packed longest first; a group over the budget alone is split into chunks.
    """
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.group, []).append(i)
    units: list[tuple[int, list[int]]] = []  # (cost, indices)
    for members in groups.values():
        longest = max(len(trajs[i].token_ids) for i in members)
        shared = plan_prefixes(trajs, members)[0].length
        per_row = longest - shared
        step = max(1, (token_budget - shared) // max(1, per_row))
        for start in range(0, len(members), step):
            chunk = members[start:start + step]
            units.append((shared + len(chunk) * per_row, chunk))
    units.sort(key=lambda u: -u[0])
    batches: list[tuple[int, list[int]]] = []
    for cost, chunk in units:
        if batches and batches[-1][0] + cost <= token_budget:
            batches[-1] = (batches[-1][0] + cost, batches[-1][1] + chunk)
        else:
            batches.append((cost, list(chunk)))
    return [b for _, b in batches]


def _cache_kwarg(model: Any) -> str:
    """The name transformers' decoder takes its KV cache under (`cache` in 5.2x, `past_key_values` before)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _prefix_cache(model: Any, prefix: torch.Tensor, rows: int) -> Any:
    """Run the prefix once and return its KV cache with every layer expanded (a view) to `rows` rows."""
    out = model(input_ids=prefix, use_cache=True)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    return cache


def group_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, group: PrefixGroup,
                 autocast: str) -> torch.Tensor:
    """Hidden states [G, L − P, d] of the group's rows at positions P..L−1 (L = the micro-batch width)."""
    base = model.base_model
    rows = torch.tensor(group.rows, device=input_ids.device)
    p = group.length
    ids, mask = input_ids.index_select(0, rows), attention_mask.index_select(0, rows)
    with mixed_precision.autocast(model, autocast):
        cache = _prefix_cache(base, ids[:1, :p], len(group.rows))
        positions = torch.arange(p, ids.shape[1], device=ids.device).expand(len(group.rows), -1)
        out = base(input_ids=ids[:, p:], attention_mask=mask, position_ids=positions, use_cache=True,
                   **{_cache_kwarg(base): cache})
    return out.last_hidden_state


def shared_hidden_at(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, sel: torch.Tensor,
                     groups: Sequence[PrefixGroup], autocast: str) -> torch.Tensor:
    """Hidden states [N, d] at the target positions `sel` [B, L−1] (row-major, as `sel` orders them),
    each group's prefix computed once; rows of groups without a shared prefix run together, plainly."""
    order = (torch.cumsum(sel.flatten().long(), 0) - 1).view(sel.shape)
    out: torch.Tensor | None = None
    plain = [r for g in groups if g.length == 0 for r in g.rows]
    parts = [(g.rows, g.length, group_hidden(model, input_ids, attention_mask, g, autocast)) for g in groups if g.length]
    if plain:
        rows = torch.tensor(plain, device=input_ids.device)
        with mixed_precision.autocast(model, autocast):
            hidden = model.base_model(input_ids=input_ids.index_select(0, rows),
                                      attention_mask=attention_mask.index_select(0, rows)).last_hidden_state
        parts.append((tuple(plain), 0, hidden))
    for rows, p, hidden in parts:
        # hidden[j, i] is position p + i of row rows[j]; position t predicts token t + 1 (target column t)
        cols = sel[list(rows), p:]
        picked = hidden[:, : cols.shape[1]][cols]
        if out is None:
            out = hidden.new_empty((int(sel.sum()), hidden.shape[-1]))
        out = out.index_copy(0, order[list(rows), p:][cols], picked)
    return out if out is not None else torch.empty((0, model.config.hidden_size))
