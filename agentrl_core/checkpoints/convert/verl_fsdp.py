"""Reader for verl FSDP actor checkpoints: `model_world_size_{W}_rank_{r}.pt` + `huggingface/`.

Layout (`global_step_N/actor/`): each rank `torch.save`s its sharded `model.state_dict()`, whose
values are DTensors (a local shard + device mesh + placements, e.g. `(Shard(0),)`), and rank 0
saves config and tokenizer into `huggingface/`. Merging one tensor of global shape S:
    for each rank r at mesh coordinates c(r), for each mesh dim i with placement Shard(d):
        chunk = ceil(S[d] / mesh.size(i));  the local shard covers [c_i * chunk, c_i * chunk + local.shape[d])
    Replicate dims add no offset (every copy is the same); Partial (unreduced sums) is refused.
Uneven shards (torch.chunk rule: earlier ranks get ceil(S[d]/n)) are handled by the same offsets.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from agentrl_core.checkpoints.convert.pickles import load_torch_file
from agentrl_core.checkpoints.convert.source import SourceWeights, clean_state_dict
from agentrl_core.errors import CheckpointError

_RANK_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


def verl_rank_files(path: Path) -> list[Path]:
    """The per-rank model files of a verl actor folder, rank order; [] if there are none."""
    found = []
    for item in path.iterdir() if path.is_dir() else []:
        match = _RANK_FILE.match(item.name)
        if match:
            found.append((int(match[1]), int(match[2]), item))
    if not found:
        return []
    sizes = {size for size, _, _ in found}
    if len(sizes) != 1:
        raise CheckpointError(
            f"{path} mixes verl checkpoints of world sizes {sorted(sizes)}; keep one"
        )
    world = sizes.pop()
    ranks = {rank: item for _, rank, item in found}
    missing = sorted(set(range(world)) - set(ranks))
    if missing:
        raise CheckpointError(
            f"{path}: verl checkpoint of world size {world} lacks the files of ranks {missing}"
        )
    return [ranks[r] for r in range(world)]


def _mesh_coords(mesh: torch.Tensor) -> dict[int, tuple[int, ...]]:
    """Global rank -> its coordinates in the device mesh (`mesh` holds rank ids)."""
    return {
        int(rank): tuple(int(i) for i in idx)
        for idx, rank in zip(torch.nonzero(mesh >= 0), mesh.flatten())
    }


def merge_dtensor_shards(name: str, shards: dict[int, torch.Tensor]) -> torch.Tensor:
    """The full tensor from each rank's DTensor of one parameter (see the module docstring)."""
    first = next(iter(shards.values()))
    shape, placements = tuple(first.shape), first.placements
    mesh = first.device_mesh.mesh
    coords = _mesh_coords(mesh)
    if any(p.is_partial() for p in placements):
        raise CheckpointError(
            f"{name}: Partial (unreduced) DTensor placements cannot be merged"
        )
    full = torch.empty(shape, dtype=first.dtype)
    covered = torch.zeros(shape, dtype=torch.bool)
    for rank, dtensor in shards.items():
        local = dtensor.to_local()
        index = [slice(None)] * len(shape)
        for mesh_dim, placement in enumerate(placements):
            if placement.is_shard():
                dim = placement.dim
                chunk = math.ceil(shape[dim] / mesh.size(mesh_dim))
                start = coords[rank][mesh_dim] * chunk
                index[dim] = slice(start, start + local.shape[dim])
        full[tuple(index)] = local
        covered[tuple(index)] = True
    if not bool(covered.all()):
        raise CheckpointError(
            f"{name}: the rank files do not cover the whole tensor {shape} (a rank file is missing?)"
        )
    return full


def _merge_plain(name: str, values: list[torch.Tensor]) -> torch.Tensor:
    """A plain (non-DTensor) entry: accepted only when every rank holds the same tensor."""
    if all(
        v.shape == values[0].shape and torch.equal(v, values[0]) for v in values[1:]
    ):
        return values[0]
    raise CheckpointError(
        f"{name}: plain tensors differ across ranks; this reader merges DTensor shards only "
        "(save with FSDP SHARDED_STATE_DICT and a device mesh, as verl does)"
    )


def read_verl_fsdp(path: Path) -> SourceWeights:
    """Full tensors of a verl FSDP actor folder (or a `global_step_N` folder holding `actor/`)."""
    from torch.distributed.tensor import DTensor

    if not verl_rank_files(path) and verl_rank_files(path / "actor"):
        path = path / "actor"
    files = verl_rank_files(path)
    if not files:
        raise CheckpointError(
            f"{path} holds no verl model files (model_world_size_W_rank_r.pt)"
        )
    states = [clean_state_dict(load_torch_file(f), f) for f in files]
    names = list(states[0])
    for rank, state in enumerate(states[1:], start=1):
        if set(state) != set(names):
            raise CheckpointError(
                f"{files[rank]} names other parameters than {files[0]}"
            )
    tensors = {}
    for name in names:
        values = [state[name] for state in states]
        if isinstance(values[0], DTensor):
            tensors[name] = merge_dtensor_shards(name, dict(enumerate(values)))
        else:
            tensors[name] = _merge_plain(name, values)
    meta_dirs = [path / "huggingface", path, path.parent / "huggingface"]
    return SourceWeights(
        tensors=tensors,
        meta_dirs=meta_dirs,
        fmt="verl_fsdp",
        info={"world_size": len(files)},
    )
