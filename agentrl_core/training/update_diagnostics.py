"""What the policy update logs besides its loss: entropy (overall and per turn), clipping, engine gap, as token means."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from agentrl_core.rollout.trajectory import Trajectory


def turn_index(trajs: Sequence[Trajectory]) -> torch.Tensor:
    """[B, W-1] long, in target columns (column c scores token c + 1, as `batching.target_mask`): the turn
    whose action the column scores (k for turn k's tokens, from `action_spans`), -1 elsewhere."""
    width = max(len(t.token_ids) for t in trajs)
    index = torch.full((len(trajs), width), -1, dtype=torch.long)
    for row, t in enumerate(trajs):
        for k, (start, end) in enumerate(t.action_spans):
            index[row, start:end] = k
    return index[:, 1:]


@dataclass
class Diagnostics:
    """Token sums of the diagnostics over the rows that were actually run, and the count of their tokens.

    The loss is normalised by the whole batch (so skipping zero-advantage rows leaves it and its
    gradient unchanged), but a diagnostic is a mean: dividing sums over the rows that ran by the
    tokens of every row would shrink it exactly when more groups carry no signal. So entropy,
    clipfrac and rollout_logp_diff are means over the model tokens of the rows run: every row
    whenever a KL or entropy term is on (or the batch has no signal at all), else the rows with a
    non-zero advantage. Entropy over the skipped rows would need their forward pass, the very cost
    skipping saves, so it is not computed. `entropy/turn_k` is the same mean over the tokens of turn
    k's actions. Entropy is the trainer's exact entropy of the policy (at the sampling temperature)
    at each position where the model sampled a token, before the update.
    """

    tokens: float = 0.0
    entropy: float = 0.0
    clipped: float = 0.0
    logp_gap: float = 0.0
    turn_entropy: dict[int, float] = field(default_factory=dict)
    turn_tokens: dict[int, float] = field(default_factory=dict)

    def add(self, mask: torch.Tensor, entropy: torch.Tensor, clipfrac: torch.Tensor | None, logp_gap: torch.Tensor,
            turns: torch.Tensor) -> None:
        """Add one micro-batch: every tensor is [b, T] over its rows (turns: `turn_index`'s, -1 outside actions)."""
        on = mask.detach().float()
        ent = entropy.detach().float() * on
        self.tokens += float(on.sum())
        self.entropy += float(ent.sum())
        self.clipped += 0.0 if clipfrac is None else float((clipfrac.detach().float() * on).sum())
        self.logp_gap += float((logp_gap.detach().float() * on).sum())
        counted = (on > 0) & (turns >= 0)
        for k, total, n in zip(*_per_turn(turns[counted], ent[counted])):
            self.turn_entropy[k] = self.turn_entropy.get(k, 0.0) + total
            self.turn_tokens[k] = self.turn_tokens.get(k, 0.0) + n

    def means(self) -> dict[str, float]:
        """entropy, clipfrac, rollout_logp_diff and entropy/turn_k as token means (0 with no tokens)."""
        n = max(self.tokens, 1.0)
        out = {"entropy": self.entropy / n, "clipfrac": self.clipped / n, "rollout_logp_diff": self.logp_gap / n}
        out.update({f"entropy/turn_{k}": self.turn_entropy[k] / self.turn_tokens[k] for k in sorted(self.turn_tokens)})
        return out


def merge(parts: list[Diagnostics]) -> Diagnostics:
    """The sums of several Diagnostics (the ranks' of one data-parallel update): their means are the batch's."""
    out = Diagnostics()
    for d in parts:
        out.tokens, out.entropy = out.tokens + d.tokens, out.entropy + d.entropy
        out.clipped, out.logp_gap = out.clipped + d.clipped, out.logp_gap + d.logp_gap
        for k, v in d.turn_entropy.items():
            out.turn_entropy[k] = out.turn_entropy.get(k, 0.0) + v
            out.turn_tokens[k] = out.turn_tokens.get(k, 0.0) + d.turn_tokens[k]
    return out


def _per_turn(turns: torch.Tensor, values: torch.Tensor) -> tuple[list[int], list[float], list[float]]:
    """(turn indices present, sum of values per turn, token count per turn) of 1-D turns and values."""
    if turns.numel() == 0:
        return [], [], []
    sums = torch.bincount(turns, weights=values.double())
    counts = torch.bincount(turns)
    present = [k for k, c in enumerate(counts.tolist()) if c > 0]
    return present, [float(sums[k]) for k in present], [float(counts[k]) for k in present]
