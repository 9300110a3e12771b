"""The training forward with the tokens that samples of a group share computed once, not once per sample.

The G samples of a GRPO group start with the same prompt (system message and first observation), and a
near-deterministic policy often repeats whole turns: samples agree on their first actions and, the game being
the same, on the observations after them. The plain forward runs every token of every sample. Here the rows
of a group are split into sub-groups that share a long common prefix (`split_rows`); each sub-group's prefix
of P tokens runs once (batch 1, keeping its keys and values), and its continuations attend to those keys and
values expanded over the rows — a view, no copy. The hidden state at a prefix position is the same for every
row of the sub-group (it depends only on the tokens up to it), so a target inside the prefix takes its
log-prob from that one state, against each row's own next token. Autograd sums the rows' gradients into the
one prefix pass, so loss and gradients equal the plain forward's up to float rounding (a test checks this),
at (G_s − 1)·P fewer tokens of forward and backward work per sub-group of G_s rows; each forward also runs only
as wide as its own longest row, not the micro-batch's.

Sub-groups: sort the group's rows by their tokens; the common prefix of a run of sorted rows is the least
common prefix of neighbours in it. For each threshold among the neighbours' common lengths, cut where a
neighbour shares less, and keep the cut that saves most tokens, Σ (G_s − 1)·P_s. Every row keeps at least
one token of its own after the prefix. Row groups, prefix lengths and the token counts saved are planned once
per micro-batch (`plan_prefixes`).
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
    """Rows of a micro-batch that share their first `length` tokens (0: rows that run whole)."""

    rows: tuple[int, ...]
    length: int

    @property
    def saved_tokens(self) -> int:
        return (len(self.rows) - 1) * self.length


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_rows(seqs: Sequence[Sequence[int]]) -> list[tuple[list[int], int]]:
    """Sub-groups of `seqs` (indices) with their shared prefix length P, chosen to maximise Σ (G_s − 1)·P_s;
    P ≤ the shortest member's length − 1, and P = 0 for a lone row or one sharing fewer than MIN_SHARED."""
    order = sorted(range(len(seqs)), key=lambda i: list(seqs[i]))
    near = [_common_length(seqs[a], seqs[b]) for a, b in zip(order, order[1:])]
    best: list[tuple[list[int], int]] = [([i], 0) for i in order]
    best_saved = 0
    for threshold in sorted(set(near)):
        parts = _cut(order, near, threshold, seqs)
        saved = sum((len(rows) - 1) * length for rows, length in parts)
        if saved > best_saved:
            best, best_saved = parts, saved
    return best


def _cut(order: list[int], near: list[int], threshold: int, seqs: Sequence[Sequence[int]]) -> list[tuple[list[int], int]]:
    """Runs of `order` whose neighbours share ≥ threshold tokens, each with its usable prefix length."""
    runs, shared = [[order[0]]], [len(seqs[order[0]])]
    for i, common in zip(order[1:], near):
        if common >= threshold:
            runs[-1].append(i)
            shared[-1] = min(shared[-1], common)
        else:
            runs.append([i])
            shared.append(len(seqs[i]))
    out = []
    for rows, common in zip(runs, shared):
        length = min(common, min(len(seqs[i]) for i in rows) - 1)
        if len(rows) > 1 and length >= MIN_SHARED:
            out.append((rows, length))
        else:
            out.extend(([i], 0) for i in rows)
    return out


def plan_prefixes(trajs: Sequence[Trajectory], index: Sequence[int]) -> list[PrefixGroup]:
    """The micro-batch `index`'s rows in sub-groups of one GRPO group sharing a prefix (`split_rows`); rows
    sharing nothing worth a pass come last, together, with length 0 (they run whole)."""
    by_group: dict[int, list[int]] = {}
    for row, i in enumerate(index):
        by_group.setdefault(trajs[i].group, []).append(row)
    shared, plain = [], []
    for rows in by_group.values():
        for members, length in split_rows([trajs[index[r]].token_ids for r in rows]):
            picked = tuple(rows[m] for m in members)
            if length:
                shared.append(PrefixGroup(picked, length))
            else:
                plain.extend(picked)
    return shared + ([PrefixGroup(tuple(sorted(plain)), 0)] if plain else [])


def planned_tokens(trajs: Sequence[Trajectory], index: Sequence[int], groups: Sequence[PrefixGroup]) -> int:
    """Tokens the forward of micro-batch `index` runs under `groups`: each group's prefix once plus its rows'
    remainders, padded to the group's longest row (what `group_hidden` runs)."""
    cost = 0
    for group in groups:
        longest = max(len(trajs[index[r]].token_ids) for r in group.rows)
        cost += group.length + len(group.rows) * (longest - group.length)
    return cost


def _group_cost(trajs: Sequence[Trajectory], members: list[int]) -> int:
    """Tokens the planned forward runs for `members` (`planned_tokens` of their own plan)."""
    return planned_tokens(trajs, members, plan_prefixes(trajs, members))


def plan_group_batches(trajs: Sequence[Trajectory], token_budget: int) -> list[list[int]]:
    """Micro-batches that keep each GRPO group together (so what its samples share runs once), under the budget.

    A group costs what its planned forward runs (`_group_cost`). Groups are packed costliest first; a group
    over the budget alone is cut into chunks of its rows in token order (rows alike stay together).
    """
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.group, []).append(i)
    units: list[tuple[int, list[int]]] = []  # (cost, indices)
    for members in groups.values():
        members = sorted(members, key=lambda i: trajs[i].token_ids)
        chunk: list[int] = []
        for i in members:
            if chunk and _group_cost(trajs, chunk + [i]) > token_budget:
                units.append((_group_cost(trajs, chunk), chunk))
                chunk = []
            chunk.append(i)
        units.append((_group_cost(trajs, chunk), chunk))
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


def group_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, group: PrefixGroup,
                 autocast: str) -> torch.Tensor:
    """Hidden states [G, W, d] of the group's rows at positions 0..W−1, W = the longest of them (right padding):
    with a shared prefix (length P > 0) positions < P come from one pass over the prefix, the rest attend to its
    keys and values; with P = 0 the rows run whole."""
    base = model.base_model
    rows = torch.tensor(group.rows, device=input_ids.device)
    mask = attention_mask.index_select(0, rows)
    width = int(mask.sum(1).max())
    ids, mask = input_ids.index_select(0, rows)[:, :width], mask[:, :width]
    p = group.length
    with mixed_precision.autocast(model, autocast):
        if p == 0:
            return base(input_ids=ids, attention_mask=mask).last_hidden_state
        prefix, cache = _prefix_pass(base, ids[:1, :p], len(group.rows))
        positions = torch.arange(p, width, device=ids.device).expand(len(group.rows), -1)
        out = base(input_ids=ids[:, p:], attention_mask=mask, position_ids=positions, use_cache=True,
                   **{_cache_kwarg(base): cache})
    rest = out.last_hidden_state
    return torch.cat([prefix.expand(len(group.rows), -1, -1).to(rest.dtype), rest], dim=1)


def _prefix_pass(model: Any, prefix: torch.Tensor, rows: int) -> tuple[torch.Tensor, Any]:
    """Run the prefix once: its hidden states [1, P, d] and its KV cache with every layer expanded (a view)
    to `rows` rows."""
    out = model(input_ids=prefix, use_cache=True)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    return out.last_hidden_state, cache


def shared_hidden_at(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, sel: torch.Tensor,
                     groups: Sequence[PrefixGroup], autocast: str) -> torch.Tensor:
    """Hidden states [N, d] at the target positions `sel` [B, L−1] (row-major, as `sel` orders them), each
    group's shared prefix computed once; every row of the micro-batch is in exactly one group."""
    order = (torch.cumsum(sel.flatten().long(), 0) - 1).view(sel.shape)
    out: torch.Tensor | None = None
    for group in groups:
        hidden = group_hidden(model, input_ids, attention_mask, group, autocast)
        # hidden[j, t] is position t of row rows[j]; position t predicts token t + 1 (target column t)
        rows = list(group.rows)
        width = min(hidden.shape[1], sel.shape[1])
        cols = sel[rows, :width]
        if out is None:
            out = hidden.new_empty((int(sel.sum()), hidden.shape[-1]))
        out = out.index_copy(0, order[rows, :width][cols], hidden[:, :width][cols])
    return out if out is not None else torch.empty((0, model.config.hidden_size))
