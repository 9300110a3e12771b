"""Resume policy: which checkpoint a run continues from, decided loudly, never silently."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from agentrl_core.checkpoints.atomic import cleanup_stale
from agentrl_core.checkpoints.layout import latest_checkpoint
from agentrl_core.errors import CheckpointError

logger = logging.getLogger(__name__)

ResumeMode = Literal["auto", "never"]
RESUME_MODES = ("auto", "never")


def resolve_resume(ckpt_root: str | Path, mode: ResumeMode = "auto") -> Path | None:
    """The checkpoint a run in `ckpt_root` should start from, or None to start fresh.

    auto:  the latest complete checkpoint, or None when there is none.
    never: None when there is no complete checkpoint; otherwise CheckpointError, because
           training from scratch would mix two runs in one folder.
    First removes temporary folders left by a crashed save (and restores a checkpoint that a
    crash left moved aside), so the scan sees what a finished save would have left.
    """
    if mode not in RESUME_MODES:
        raise ValueError(f"unknown resume mode {mode!r}; valid modes: {list(RESUME_MODES)}")
    root = Path(ckpt_root)
    cleanup_stale(root)
    latest = latest_checkpoint(root)
    if latest is None:
        logger.info("no complete checkpoint in %s: starting from scratch", root)
        return None
    if mode == "never":
        raise CheckpointError(
            f"{root} already holds checkpoint {latest.name} and resume is 'never': "
            "pick a new run name, delete the folder, or set resume to 'auto' to continue it"
        )
    logger.info("resuming from checkpoint %s", latest)
    return latest
