"""`convert_to_hf`: any supported checkpoint folder -> a standalone Hugging Face safetensors folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentrl_core.checkpoints.convert.deepspeed_zero import read_deepspeed
from agentrl_core.checkpoints.convert.detect import FORMATS, detect_format
from agentrl_core.checkpoints.convert.hf_out import write_hf_folder
from agentrl_core.checkpoints.convert.ours import read_ours
from agentrl_core.checkpoints.convert.source import SourceWeights
from agentrl_core.checkpoints.convert.torch_dcp import read_dcp
from agentrl_core.checkpoints.convert.verl_fsdp import read_verl_fsdp
from agentrl_core.errors import CheckpointError

READERS: dict[str, Callable[[Path], SourceWeights]] = {
    "ours": read_ours,
    "verl_fsdp": read_verl_fsdp,
    "dcp": read_dcp,
    "deepspeed": read_deepspeed,
}


def convert_to_hf(
    source: str | Path,
    out_dir: str | Path,
    *,
    base_model: str | None = None,
    fmt: str = "auto",
    dtype: str | None = None,
) -> Path:
    """Merge the checkpoint at `source` into full tensors and write `out_dir` as a HF folder.

    `fmt`: "auto" (detect from the files) or one of FORMATS. `base_model` (an alias, HF folder
    or hub id) supplies config.json / tokenizer / generation_config when the checkpoint has none
    beside it (always needed for a bare DCP folder). `dtype`: cast floating weights ("bfloat16",
    "float16", "float32"); None keeps what the checkpoint stores (fp32 for DeepSpeed masters).
    The output holds model.safetensors, config.json, tokenizer files, generation_config.json and
    a COMPLETE marker, and appears atomically: on any error no (half) folder is left.
    """
    source, out_dir = Path(source), Path(out_dir)
    if fmt == "auto":
        fmt = detect_format(source)
    elif fmt not in READERS:
        raise CheckpointError(
            f"unknown checkpoint format {fmt!r}; choose 'auto' or one of {list(FORMATS)}"
        )
    if not source.is_dir():
        raise CheckpointError(f"cannot convert {source}: no such folder")
    weights = READERS[fmt](source)
    return write_hf_folder(weights, out_dir, base_model=base_model, dtype=dtype)
