"""Convert checkpoints of our trainer, verl FSDP, torch DCP and DeepSpeed ZeRO to HF safetensors folders."""

from agentrl_core.checkpoints.convert.detect import FORMATS, detect_format
from agentrl_core.checkpoints.convert.to_hf import READERS, convert_to_hf

__all__ = ["FORMATS", "READERS", "convert_to_hf", "detect_format"]
