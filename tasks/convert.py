"""The conversion task: any supported checkpoint format → a Hugging Face folder."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact

from agentrl_core.checkpoints.convert import convert_to_hf, detect_format
from tasks.retry import retry_unless_disk_full


@task(name="convert-checkpoint", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_disk_full)
def convert(source: str, out_dir: str, fmt: str, base_model: str | None, dtype: str | None) -> dict:
    """Convert `source` (ours, verl FSDP, torch DCP or DeepSpeed ZeRO) into `out_dir`; returns what was done."""
    fmt = detect_format(source) if fmt == "auto" else fmt
    out = convert_to_hf(source, out_dir, base_model=base_model, fmt=fmt, dtype=dtype)
    get_run_logger().info("converted %s (%s) → %s", source, fmt, out)
    create_link_artifact(link=out.resolve().as_uri(), link_text=f"converted checkpoint ({fmt})", key="converted")
    return {"source": source, "format": fmt, "out": str(out)}
