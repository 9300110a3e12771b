"""Trajectories to padded tensors, split into micro-batches under a token budget."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import torch

from agentrl_core.rollout.trajectory import Trajectory


@dataclass
class MicroBatch:
    """Right-padded tensors of some trajectories; targets are shifted by one.

    input_ids, attention_mask: [B, L]. target_mask, old_logprobs, advantages: [B, L-1], where
    position t scores token t+1 (what the model predicts from its prefix).
    """

    index: list[int]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    target_mask: torch.Tensor
    engine_logprobs: torch.Tensor
    advantages: torch.Tensor
    prefixes: list[Any] = field(default_factory=list)
    """Row groups sharing a prompt (training.shared_prefix.PrefixGroup); empty = every row runs whole."""
    weight: float = 1.0
    """1, or 0 for a copy that only keeps the ranks' passes in step (training.data_parallel): it adds nothing."""

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> MicroBatch:
        """The same micro-batch with its tensors on `device` (itself when they are there already)."""
        if self.input_ids.device == torch.device(device):
            return self
        return replace(self, **{name: getattr(self, name).to(device) for name in
                                ("input_ids", "attention_mask", "target_mask", "engine_logprobs", "advantages")})


def plan_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group sequence indices so that (longest in group) x (group size) <= budget.

    Sorting by length first keeps padding small; a sequence longer than the budget goes alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= token_budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def target_mask(trajs: Sequence[Trajectory]) -> torch.Tensor:
    """[B, W-1] (W = longest trajectory): 1 where position t scores a model token t+1, as in collate."""
    width = max(len(t.token_ids) for t in trajs)
    mask = torch.zeros((len(trajs), width), dtype=torch.float32)
    for row, t in enumerate(trajs):
        mask[row, : len(t.token_ids)] = torch.tensor(t.loss_mask, dtype=torch.float32)
    return mask[:, 1:]


def collate(trajs: Sequence[Trajectory], index: list[int], pad_id: int, seq_adv: torch.Tensor | None = None) -> MicroBatch:
    """Pad trajectories `index` into a MicroBatch; `seq_adv[i]` is broadcast over i's model tokens."""
    width = max(len(trajs[i].token_ids) for i in index)
    b = len(index)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    lmask = torch.zeros((b, width), dtype=torch.float32)
    elogp = torch.zeros((b, width), dtype=torch.float32)
    for row, i in enumerate(index):
        t = trajs[i]
        n = len(t.token_ids)
        ids[row, :n] = torch.tensor(t.token_ids)
        attn[row, :n] = 1
        lmask[row, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
        elogp[row, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
    target_mask = lmask[:, 1:]
    adv = torch.zeros_like(target_mask)
    if seq_adv is not None:
        adv = seq_adv[index].unsqueeze(1) * target_mask
    return MicroBatch(index, ids, attn, target_mask, elogp[:, 1:], adv)
