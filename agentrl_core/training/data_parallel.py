"""Data parallelism of one policy update over the ranks of a torch process group (several trainer workers).

Every rank computes the advantages of the whole batch (cheap, and the group baselines need every sample), plans
the same micro-batches, and runs its share of them: micro-batch j on rank j mod N. The loss of each is normalised
by the whole batch (LossNorm), so the batch's gradient is the SUM of the ranks' gradients:
    g = sum_r sum_{j in r} d loss_j / d theta
A backend that averages the ranks' gradients at its step (DeepSpeed's ZeRO reduction: g_r summed, then / N) gets
each rank's loss multiplied by N first. Every rank runs the same number of forward/backward passes (ZeRO-3
gathers the parameters in them: a rank that ran fewer would hang the others): ranks with fewer micro-batches
pad with a copy of one whose loss counts zero (`MicroBatch.weight` = 0). The step's logged loss terms and
diagnostics are summed over the ranks at the end, so every rank returns the whole batch's metrics.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from agentrl_core.training.batching import MicroBatch


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of ranks) of the default process group; (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def my_share(batches: list[MicroBatch], rank: int, world: int) -> list[MicroBatch]:
    """Micro-batches rank, rank + N, ... of `batches`, padded to ceil(len / N) with zero-weight copies of the
    first one (the same number of passes on every rank). world 1: `batches` as they are."""
    if world == 1:
        return batches
    mine = batches[rank::world]
    per_rank = -(-len(batches) // world)
    return mine + [replace(batches[0], weight=0.0) for _ in range(per_rank - len(mine))]


def sum_over_ranks(values: dict[str, float], keys: tuple[str, ...], world: int) -> dict[str, float]:
    """`values` with each of `keys` present summed over the ranks (all-reduce); unchanged with one rank."""
    present = [k for k in keys if k in values]
    if world == 1 or not present:
        return values
    t = torch.tensor([values[k] for k in present], dtype=torch.float64, device=collective_device())
    torch.distributed.all_reduce(t)
    return values | dict(zip(present, t.tolist()))


def collective_device() -> torch.device:
    """Where a tensor for a collective must live: the current GPU under NCCL (which reduces CUDA tensors only),
    the CPU under gloo."""
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_objects(obj: Any, world: int) -> list[Any]:
    """Every rank's `obj` (all_gather_object), in rank order; [obj] with one rank."""
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, obj)
    return out


def from_rank_zero(obj: Any, world: int) -> Any:
    """Rank 0's `obj` on every rank (broadcast_object_list); `obj` itself with one rank."""
    if world == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def barrier(world: int) -> None:
    """Wait for every rank (nothing with one rank)."""
    if world > 1:
        torch.distributed.barrier()
