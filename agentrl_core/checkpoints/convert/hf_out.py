"""Write full tensors as a Hugging Face folder: model.safetensors, config, tokenizer, generation config.

The tensors are checked against the architecture that config.json describes (built on the meta
device, so no memory is used): every parameter must be present with its shape, no extra names,
and a tied group (e.g. `lm_head.weight` = `model.embed_tokens.weight`) is written once, as
`save_pretrained` does. The folder is built under a temporary name and renamed when complete.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from agentrl_core.checkpoints.atomic import atomic_dir, cleanup_stale
from agentrl_core.checkpoints.convert.source import SourceWeights
from agentrl_core.checkpoints.export import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    TOKENIZER_FILES,
    check_target,
)
from agentrl_core.checkpoints.weights import SINGLE_FILE
from agentrl_core.errors import CheckpointError

logger = logging.getLogger(__name__)

TOKENIZER_EXTRA = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
    "vocab.txt",
    "chat_template.jinja",
    "chat_template.json",
)
"""Files copied with the tokenizer when present (besides TOKENIZER_FILES)."""

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_SHOWN = 8


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def _pick(dirs: list[Path], wanted, base_model: str | None, what: str) -> Path:
    """The first of `dirs` satisfying `wanted`, else the base model's folder, else CheckpointError."""
    for folder in dirs:
        if folder.is_dir() and wanted(folder):
            return folder
    if base_model is not None:
        from agentrl_core.models import resolve_model

        folder = resolve_model(base_model)
        if wanted(folder):
            return folder
        raise CheckpointError(
            f"the base model {base_model!r} ({folder}) has no {what} either"
        )
    raise CheckpointError(
        f"no {what} next to the checkpoint (looked in {[str(d) for d in dirs]}); pass base_model=... "
        "(the model the run started from, e.g. 'smollm2-135m-instruct' or a HF folder) to take it from there"
    )


def _tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """Names of each parameter/buffer in model order; tied weights share one group, first name canonical."""
    groups: dict[object, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    persistent = set(model.state_dict())
    known = {n for g in groups.values() for n in g}
    for name in sorted(persistent - known):  # persistent buffers: one name each
        groups[("buffer", name)] = [name]
    return [
        [n for n in g if n in persistent]
        for g in groups.values()
        if any(n in persistent for n in g)
    ]


def _report(label: str, names: set[str]) -> str:
    shown = sorted(names)[:_SHOWN]
    return f"{label}: {shown}" + (
        f" (+{len(names) - len(shown)} more)" if len(names) > len(shown) else ""
    )


def fit_to_architecture(
    tensors: dict[str, torch.Tensor], config
) -> dict[str, torch.Tensor]:
    """The tensors to save: checked against the model `config` builds, one entry per tied group."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    out, missing, bad_shape = {}, set(), []
    for group in _tied_groups(model):
        present = [n for n in group if n in tensors]
        if not present:
            missing.add(group[0])
            continue
        first = tensors[present[0]]
        for other in present[1:]:
            if not torch.equal(tensors[other], first):
                raise CheckpointError(
                    f"{present[0]} and {other} are tied in the config but differ in the checkpoint"
                )
        if tuple(first.shape) != shapes[group[0]]:
            bad_shape.append(
                f"{present[0]}: checkpoint {tuple(first.shape)} vs config {shapes[group[0]]}"
            )
        out[group[0]] = first
    unexpected = set(tensors) - set(shapes)
    if missing or unexpected or bad_shape:
        parts = [_report("missing", missing)] if missing else []
        parts += [_report("unexpected", unexpected)] if unexpected else []
        parts += [f"shape mismatches: {bad_shape[:_SHOWN]}"] if bad_shape else []
        raise CheckpointError(
            f"the checkpoint does not match the {config.model_type} architecture of its config.json "
            f"({'; '.join(parts)}): is the config (or base_model) the one the run trained?"
        )
    return out


def _cast(
    tensors: dict[str, torch.Tensor], dtype: str | None
) -> tuple[dict[str, torch.Tensor], torch.dtype]:
    """Floating tensors cast to `dtype` (None: kept) as contiguous, unshared copies; and the dtype written."""
    if dtype is not None and dtype not in DTYPES:
        raise CheckpointError(
            f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}"
        )
    target = DTYPES.get(dtype) if dtype else None
    out = {}
    for name, tensor in tensors.items():
        if target is not None and tensor.is_floating_point():
            tensor = tensor.to(target)
        out[name] = tensor.detach().contiguous().clone()
    floats = [t.dtype for t in out.values() if t.is_floating_point()]
    written = target or (
        max(set(floats), key=floats.count) if floats else torch.float32
    )
    return out, written


def _copy_tokenizer(source: Path, dest: Path) -> None:
    for name in (*TOKENIZER_FILES, *TOKENIZER_EXTRA):
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)


def _write_generation_config(config_dir: Path, config, dest: Path) -> None:
    if (config_dir / GENERATION_CONFIG_FILE).is_file():
        shutil.copy2(config_dir / GENERATION_CONFIG_FILE, dest / GENERATION_CONFIG_FILE)
        return
    from transformers import GenerationConfig

    GenerationConfig.from_model_config(config).save_pretrained(dest)


def write_hf_folder(
    source: SourceWeights, out_dir: Path, *, base_model: str | None, dtype: str | None
) -> Path:
    """Write `source` as a standalone HF folder at `out_dir`, atomically (see the module docstring)."""
    from transformers import AutoConfig

    config_dir = _pick(
        source.meta_dirs, lambda d: (d / CONFIG_FILE).is_file(), base_model, CONFIG_FILE
    )
    tokenizer_dir = _pick(
        source.meta_dirs, _has_tokenizer, base_model, "tokenizer files"
    )
    config = AutoConfig.from_pretrained(config_dir)
    tensors, written = _cast(fit_to_architecture(source.tensors, config), dtype)
    config.dtype = (
        written  # from_pretrained(dtype="auto") then loads exactly what is stored
    )
    cleanup_stale(out_dir.parent)
    check_target(out_dir)
    info = {
        "converted_from": source.fmt,
        "config_from": str(config_dir),
        "tokenizer_from": str(tokenizer_dir),
    }
    with atomic_dir(out_dir, {**info, **source.info}) as tmp:
        save_file(tensors, str(tmp / SINGLE_FILE), metadata={"format": "pt"})
        config.save_pretrained(tmp)
        _copy_tokenizer(tokenizer_dir, tmp)
        _write_generation_config(config_dir, config, tmp)
    logger.info(
        "converted a %s checkpoint to %s (%d tensors)",
        source.fmt,
        out_dir,
        len(tensors),
    )
    return out_dir
