"""The batch a step-level advantage estimator sees: episode rewards plus each episode's turns."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepTurn:
    """One model turn of an episode, in the coordinates of the batch's token mask."""

    start: int
    """First column of `StepBatch.mask` holding this turn's action tokens."""
    end: int
    """One past the last such column."""
    reward: float
    """r_t: the environment's reward for this step (0 where it gave none)."""
    state: str
    """Key of the observation the action was taken in; equal keys = the same state (exact match)."""


@dataclass(frozen=True)
class StepBatch:
    """What a step estimator reads; sequence estimators read `rewards`, `groups`, `mask` alone.

    rewards [B] float: each episode's return R_i (after any reward shaping); groups [B] long: the
    task's group id; mask [B,T]: 1 on model tokens; turns[i]: episode i's turns in order (empty for
    an episode recorded without them: its tokens get the episode-level advantage alone).
    """

    rewards: torch.Tensor
    groups: torch.Tensor
    mask: torch.Tensor
    turns: list[list[StepTurn]]

    def __post_init__(self) -> None:
        if len(self.turns) != self.rewards.shape[0]:
            raise ValueError(f"turns holds {len(self.turns)} episodes but rewards {self.rewards.shape[0]}; "
                             "give one list of turns per episode (empty when it has none)")
