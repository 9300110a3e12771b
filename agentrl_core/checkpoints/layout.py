"""Checkpoint folder layout: `<ckpt_root>/step_000010/` names, and finding the complete ones."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from agentrl_core.checkpoints.atomic import MARKER, is_complete

logger = logging.getLogger(__name__)

STEP_DIGITS = 6
MODEL_DIR = "model"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "trainer_state.json"

_STEP_NAME = re.compile(r"^step_(\d+)$")


def step_dir(ckpt_root: str | Path, step: int) -> Path:
    """Folder of the checkpoint at `step`: `<ckpt_root>/step_<step zero-padded to 6 digits>`."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return Path(ckpt_root) / f"step_{step:0{STEP_DIGITS}d}"


def parse_step(path: str | Path) -> int | None:
    """The step number of a `step_*` folder name, or None for any other name."""
    match = _STEP_NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(ckpt_root: str | Path, *, warn: bool = True) -> list[Path]:
    """Complete checkpoint folders under `ckpt_root`, oldest step first.

    `step_*` folders without the marker are skipped (a `logging.warning` names each one when
    `warn`): resume must never load a half-written checkpoint.
    """
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for entry in root.iterdir():
        step = parse_step(entry)
        if step is None or not entry.is_dir():
            continue
        if is_complete(entry):
            found.append((step, entry))
        elif warn:
            logger.warning("ignoring incomplete checkpoint %s (no %s marker)", entry, MARKER)
    return [path for _, path in sorted(found)]


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under `ckpt_root`, or None when there is none."""
    complete = list_checkpoints(ckpt_root)
    return complete[-1] if complete else None
