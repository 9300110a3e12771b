"""The conversion pipeline: a training checkpoint (ours, verl FSDP, DCP, DeepSpeed) → HF safetensors."""

from __future__ import annotations

from typing import Literal

from prefect import flow

from tasks.convert import convert


@flow(name="convert-checkpoint", log_prints=True, validate_parameters=True)
def convert_checkpoint(source: str, out_dir: str,
                       format: Literal["auto", "ours", "verl_fsdp", "dcp", "deepspeed"] = "auto",
                       base_model: str | None = None,
                       dtype: Literal["float32", "bfloat16", "float16"] | None = None) -> dict:
    """Convert the checkpoint folder `source` into a Hugging Face folder `out_dir` (config, tokenizer,
    generation config, safetensors). `base_model` supplies config/tokenizer when the checkpoint has none."""
    return convert(source, out_dir, format, base_model, dtype)
