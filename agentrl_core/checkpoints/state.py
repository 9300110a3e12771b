"""Save and load one training checkpoint: model folder, optimizer, scheduler, RNG and trainer state.

Layout of `<ckpt_root>/step_000010/`:
    model/               Hugging Face folder (save_pretrained, safetensors) + tokenizer files; for a
                         LoRA run (model is a PeftModel) the adapter only: adapter_config.json +
                         adapter_model.safetensors, the base named by trainer_state's base_model
    optimizer.pt         optimizer.state_dict()
    scheduler.pt         scheduler.state_dict()
    rng.pt               python / numpy / torch (and CUDA) RNG states
    trainer_state.json   {"step", "saved_at", "saved_at_utc", **caller's state}
    COMPLETE             marker, written last
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl_core.checkpoints.atomic import (
    MARKER,
    atomic_dir,
    cleanup_stale,
    is_complete,
    remove_dir,
)
from agentrl_core.checkpoints.layout import (
    MODEL_DIR,
    OPTIMIZER_FILE,
    RNG_FILE,
    SCHEDULER_FILE,
    STATE_FILE,
    list_checkpoints,
    parse_step,
    step_dir,
)
from agentrl_core.checkpoints.rng import capture_rng_state, restore_rng_state
from agentrl_core.checkpoints.weights import load_model_weights, model_folder
from agentrl_core.errors import CheckpointError
from agentrl_core.models.lora import is_adapter_folder, load_adapter_weights

logger = logging.getLogger(__name__)


def _json_default(obj: Any) -> Any:
    """Turn the few non-JSON values a trainer state commonly holds into JSON ones."""
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    if hasattr(obj, "model_dump"):  # a pydantic model, e.g. the run config
        return obj.model_dump(mode="json")
    raise TypeError(
        f"trainer state holds a {type(obj).__name__}, which is not JSON-serialisable: "
        "convert it to str, number, list or dict before saving"
    )


def _trainer_state(step: int, state: dict) -> dict:
    if "step" in state and state["step"] != step:
        raise ValueError(f"state['step'] is {state['step']} but the checkpoint step is {step}")
    now = time.time()
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    return {**state, "step": step, "saved_at": now, "saved_at_utc": stamp}


def _write_files(tmp: Path, step: int, model, tokenizer, optimizer, scheduler, state: dict) -> None:
    # Serialise the state first: a bad value fails before the expensive model write.
    payload = json.dumps(_trainer_state(step, state), indent=1, default=_json_default)
    model.save_pretrained(tmp / MODEL_DIR, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp / MODEL_DIR)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    if scheduler is not None:
        torch.save(scheduler.state_dict(), tmp / SCHEDULER_FILE)
    torch.save(capture_rng_state(), tmp / RNG_FILE)
    (tmp / STATE_FILE).write_text(payload, encoding="utf-8")


def prune_checkpoints(ckpt_root: str | Path, keep_last: int, *, protect: Path | None = None) -> list[Path]:
    """Delete all but the `keep_last` highest-step complete checkpoints (never `protect`)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (or None to keep all), got {keep_last}")
    complete = list_checkpoints(ckpt_root, warn=False)
    doomed = [p for p in complete[: max(len(complete) - keep_last, 0)] if p != protect]
    for path in doomed:
        logger.info("pruning old checkpoint %s (keep_last=%d)", path, keep_last)
        remove_dir(path)
    return doomed


def save_checkpoint(
    ckpt_root: str | Path,
    step: int,
    *,
    model,
    tokenizer,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    state: dict | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write the checkpoint of `step` atomically under `ckpt_root` and return its folder.

    Everything goes into a hidden temporary sibling, is fsynced, gets the COMPLETE marker last
    and is then renamed to `step_<step:06d>` (an existing folder of that name is replaced
    safely). Afterwards only the last `keep_last` complete checkpoints are kept (None: all).
    `model` must be the unwrapped Hugging Face model (not a DDP/compiled wrapper), or the
    PeftModel of a LoRA run, which saves its adapter only.
    """
    root = Path(ckpt_root)
    final = step_dir(root, step)
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (or None to keep all), got {keep_last}")
    cleanup_stale(root)
    newer = [p for p in list_checkpoints(root, warn=False) if (parse_step(p) or 0) > step]
    if newer:
        logger.warning("saving step %d while %s exists: latest_checkpoint() still returns that one", step, newer[-1])
    with atomic_dir(final, {"step": step}) as tmp:
        _write_files(tmp, step, model, tokenizer, optimizer, scheduler, state or {})
    logger.info("saved checkpoint %s", final)
    if keep_last is not None:
        prune_checkpoints(root, keep_last, protect=final)
    return final


def _missing_parts(path: Path, model, optimizer, scheduler, restore_rng: bool) -> list[str]:
    wanted = [(MARKER, True), (STATE_FILE, True), (MODEL_DIR, model is not None)]
    wanted += [(OPTIMIZER_FILE, optimizer is not None), (SCHEDULER_FILE, scheduler is not None)]
    wanted += [(RNG_FILE, restore_rng)]
    return [name for name, needed in wanted if needed and not (path / name).exists()]


def _load_weights(path: Path, model) -> None:
    """Full weights into a model, or a saved adapter into the PeftModel of a LoRA run."""
    folder = model_folder(path)
    if not is_adapter_folder(folder):
        load_model_weights(path, model)
        return
    if not hasattr(model, "disable_adapter"):
        raise CheckpointError(f"{path} holds a LoRA adapter: pass the PeftModel (base model wrapped by peft) to load it")
    load_adapter_weights(folder, model)


def load_checkpoint(
    path: str | Path,
    *,
    model=None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
) -> dict:
    """Restore what is asked for from the checkpoint folder `path` and return its trainer state.

    The model is usually built by the caller with `from_pretrained(path / "model")`; pass
    `model` to load the weights into an existing one instead (strict, see `load_model_weights`),
    or, for a LoRA checkpoint, the PeftModel to load the adapter into (strict as well).
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    missing = _missing_parts(path, model, optimizer, scheduler, restore_rng)
    if missing:
        hint = " (a save crashed mid-write; resume from latest_checkpoint())" if not is_complete(path) else ""
        raise CheckpointError(f"checkpoint {path} is missing {', '.join(missing)}{hint}")
    trainer_state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    if model is not None:
        _load_weights(path, model)
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True))
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(path / SCHEDULER_FILE, map_location="cpu", weights_only=True))
    if restore_rng:
        restore_rng_state(torch.load(path / RNG_FILE, map_location="cpu", weights_only=True))
    logger.info("loaded checkpoint %s (step %s)", path, trainer_state.get("step"))
    return trainer_state
