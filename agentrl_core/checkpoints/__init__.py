"""Checkpoints: atomic step folders, resume, export to a standalone Hugging Face folder, and
conversion to one from other trainers' formats (verl FSDP, torch DCP, DeepSpeed ZeRO)."""

from agentrl_core.checkpoints.atomic import MARKER, cleanup_stale, is_complete
from agentrl_core.checkpoints.convert import convert_to_hf, detect_format
from agentrl_core.checkpoints.export import export_hf
from agentrl_core.checkpoints.layout import latest_checkpoint, list_checkpoints, parse_step, step_dir
from agentrl_core.checkpoints.resume import RESUME_MODES, resolve_resume
from agentrl_core.checkpoints.state import load_checkpoint, prune_checkpoints, save_checkpoint
from agentrl_core.checkpoints.weights import load_model_weights

__all__ = [
    "MARKER",
    "RESUME_MODES",
    "cleanup_stale",
    "convert_to_hf",
    "detect_format",
    "export_hf",
    "is_complete",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_model_weights",
    "parse_step",
    "prune_checkpoints",
    "resolve_resume",
    "save_checkpoint",
    "step_dir",
]
