"""Reader for DeepSpeed ZeRO-1/2/3 checkpoints: the fp32 master weights, rebuilt without DeepSpeed.

Layout (facts from DeepSpeed's `utils/zero_to_fp32.py`): `<root>/latest` names the tag folder,
e.g. `global_step10/`, which holds
    model states  ZeRO-1/2: `mp_rank_00_model_states.pt`; ZeRO-3: `zero_pp_rank_{r}_mp_rank_00_model_states.pt`
                  dict with `param_shapes` (one {name: shape} per param group, in flattening order),
                  `buffer_names`, `module` (buffers; params in half precision or empty), `shared_params`
                  ({alias: source name}, e.g. tied lm_head), optional `frozen_param_shapes/fragments`
    optim states  `*zero_pp_rank_{r}_mp_rank_00_optim_states.pt`, one per data-parallel rank, holding
                  `optimizer_state_dict` = {`zero_stage`, `partition_count`, and the fp32 partitions:
                  ZeRO-1/2 `single_partition_of_fp32_groups`, ZeRO-3 `fp32_flat_groups` (a list per group)}
Reassembly with world size W:
    ZeRO-1/2, per group g: flat_g = cat_r(partition[r][g]); params are consecutive slices of flat_g in
        `param_shapes[g]` order; the tail is padding (the flat size is aligned to 2W).
    ZeRO-3: every param p of n elements is padded to W * ceil(n / W) and rank r holds the slice
        [r * ceil(n/W), (r+1) * ceil(n/W)); each rank's groups are concatenated in param order, so
        p = cat_r(rank_flat[r][off : off + ceil(n/W)])[:n], off advancing by ceil(n/W) per param.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from agentrl_core.checkpoints.convert.pickles import load_torch_file
from agentrl_core.checkpoints.convert.source import SourceWeights, clean_state_dict
from agentrl_core.errors import CheckpointError

LATEST_FILE = "latest"
_RANK = re.compile(r"zero_pp_rank_(\d+)_")


def _tag_dir(path: Path) -> Path:
    """The folder holding the state files: `path` itself, or the tag its `latest` file names."""
    if any(path.glob("*_optim_states.pt")):
        return path
    latest = path / LATEST_FILE
    if latest.is_file():
        tag = latest.read_text(encoding="utf-8").strip()
        if (path / tag).is_dir():
            return path / tag
        raise CheckpointError(
            f"{latest} names the tag {tag!r}, but {path / tag} does not exist"
        )
    tags = sorted(p.name for p in path.glob("global_step*") if p.is_dir())
    hint = f" (tag folders found: {tags}; pick one)" if tags else ""
    raise CheckpointError(
        f"{path} has no `{LATEST_FILE}` file and no *_optim_states.pt files{hint}"
    )


def is_deepspeed_folder(path: Path) -> bool:
    """True when `path` is a ZeRO tag folder or a root whose `latest` file names one."""
    if any(path.glob("*_optim_states.pt")):
        return True
    latest = path / LATEST_FILE
    return (
        latest.is_file()
        and (path / latest.read_text(encoding="utf-8").strip()).is_dir()
    )


def _by_rank(files: list[Path]) -> list[Path]:
    def rank(file: Path) -> int:
        match = _RANK.search(file.name)
        return int(match[1]) if match else 0

    return sorted(files, key=rank)


def _optimizer_partitions(tag: Path) -> tuple[int, list[list[torch.Tensor]]]:
    """(zero stage, fp32 partitions [rank][group]) from the optimizer state files of every rank."""
    files = _by_rank(list(tag.glob("*_optim_states.pt")))
    if not files:
        raise CheckpointError(f"{tag} has no *_optim_states.pt files")
    states = [load_torch_file(f)["optimizer_state_dict"] for f in files]
    stage = int(states[0]["zero_stage"])
    count = states[0]["partition_count"]
    world = max(count) if isinstance(count, (list, tuple)) else int(count)
    if world != len(files):
        raise CheckpointError(
            f"{tag}: the optimizer states say {world} data-parallel ranks but there are {len(files)} "
            "*_optim_states.pt files (a rank's save is missing or an old one was left behind)"
        )
    key = "fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"
    if stage not in (1, 2, 3):
        raise CheckpointError(f"{tag}: unknown ZeRO stage {stage}")
    return stage, [list(s[key]) for s in states]


def _model_states(tag: Path, stage: int) -> list[dict]:
    pattern = (
        "zero_pp_rank_*_mp_rank_00_model_states.pt"
        if stage == 3
        else "mp_rank_00_model_states.pt"
    )
    files = _by_rank(list(tag.glob(pattern)))
    if not files:
        raise CheckpointError(
            f"{tag}: no model states file ({pattern}) for a ZeRO-{stage} checkpoint"
        )
    return [load_torch_file(f) for f in files]


def _zero2_params(
    param_shapes: list[dict], parts: list[list[torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """ZeRO-1/2: per group, concatenate the ranks' partitions and cut it into params in order."""
    world, tensors = len(parts), {}
    for group, shapes in enumerate(param_shapes):
        flat = torch.cat([rank_parts[group].reshape(-1) for rank_parts in parts])
        offset = 0
        for name, shape in shapes.items():
            numel = math.prod(shape)
            tensors[name] = flat[offset : offset + numel].view(tuple(shape)).clone()
            offset += numel
        align = 2 * world
        if math.ceil(offset / align) * align != math.ceil(flat.numel() / align) * align:
            raise CheckpointError(
                f"param group {group}: the shapes use {offset} elements but the partitions hold "
                f"{flat.numel()} (more than alignment padding): param_shapes and optimizer files disagree"
            )
    return tensors


def _zero3_params(
    param_shapes: list[dict], parts: list[list[torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """ZeRO-3: each param is split evenly (padded) across ranks; gather its slice from every rank."""
    world = len(parts)
    rank_flat = [torch.cat([g.reshape(-1) for g in rank_parts]) for rank_parts in parts]
    offset, tensors = 0, {}
    for shapes in param_shapes:
        for name, shape in shapes.items():
            numel = math.prod(shape)
            per_rank = math.ceil(numel / world)
            pieces = [flat[offset : offset + per_rank] for flat in rank_flat]
            tensors[name] = torch.cat(pieces)[:numel].view(tuple(shape)).clone()
            offset += per_rank
    if offset != rank_flat[0].numel():
        raise CheckpointError(
            f"the ZeRO-3 shapes use {offset} elements per rank but each rank holds {rank_flat[0].numel()}: "
            "param_shapes and optimizer files disagree"
        )
    return tensors


def _frozen_params(states: list[dict], stage: int) -> dict[str, torch.Tensor]:
    """Parameters with requires_grad=False: whole in ZeRO-2 model states, split per rank in ZeRO-3."""
    shapes = states[0].get("frozen_param_shapes") or {}
    tensors = {}
    for name, shape in shapes.items():
        numel = math.prod(shape)
        if stage == 3:
            flat = torch.cat(
                [s["frozen_param_fragments"][name].reshape(-1) for s in states]
            )
        else:
            flat = states[0]["frozen_param_fragments"][name].reshape(-1)
        tensors[name] = flat[:numel].view(tuple(shape)).float().clone()
    return tensors


def _as_fp32(tensor: torch.Tensor) -> torch.Tensor:
    """Floating buffers in fp32 (like the master weights); integer buffers unchanged."""
    return tensor.float() if tensor.is_floating_point() else tensor


def read_deepspeed(path: Path) -> SourceWeights:
    """Full fp32 tensors of a ZeRO checkpoint (root with `latest`, or a tag folder)."""
    tag = _tag_dir(path)
    stage, parts = _optimizer_partitions(tag)
    states = _model_states(tag, stage)
    param_shapes = states[0]["param_shapes"]
    if not isinstance(param_shapes, (list, tuple)):
        param_shapes = [param_shapes]
    merge = _zero3_params if stage == 3 else _zero2_params
    tensors = {**_frozen_params(states, stage), **merge(list(param_shapes), parts)}
    buffers = states[0].get("buffer_names") or []
    module = states[0].get("module") or {}
    tensors.update({name: _as_fp32(module[name]) for name in buffers if name in module})
    for alias, source in (states[0].get("shared_params") or {}).items():
        if source in tensors:
            tensors[alias] = tensors[source]
    meta_dirs = [tag.parent, tag.parent / "huggingface", tag]
    info = {"zero_stage": stage, "world_size": len(parts), "tag": tag.name}
    return SourceWeights(
        tensors=clean_state_dict(tensors, tag),
        meta_dirs=meta_dirs,
        fmt="deepspeed",
        info=info,
    )
