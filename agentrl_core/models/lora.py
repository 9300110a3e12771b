"""LoRA adapters (peft): wrap a loaded model, save/load the adapter strictly, switch it off, merge it.

A LoRA layer replaces W x by W x + (α/r)·B A x with A: [r, d_in], B: [d_out, r]; only A and B train
(B starts at zero, so a fresh adapter leaves the model's outputs unchanged). peft injects the
layers in place, so the wrapped Hugging Face model (`PeftModel.get_base_model()`) is the one the
training loops run: it computes W x + (α/r)·B A x, and under `disable_adapter()` just W x.
Merging writes W' = W + (α/r)·B A into each targeted weight, giving a plain model again.
"""

from __future__ import annotations

import json
import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from agentrl_core.config import LoraConfig
from agentrl_core.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
# Adapter settings that change the trained function; dropout only changes training noise.
_SHAPE_KEYS = {"r": "r", "lora_alpha": "alpha"}


def is_adapter_folder(folder: str | Path) -> bool:
    """True when `folder` holds a peft adapter (adapter_config.json) rather than full weights."""
    return (Path(folder) / ADAPTER_CONFIG_FILE).is_file()


def peft_config(cfg: LoraConfig) -> Any:
    """peft's LoraConfig (task CAUSAL_LM) for the recipe's `model.lora` section."""
    import peft

    return peft.LoraConfig(task_type=peft.TaskType.CAUSAL_LM, r=cfg.r, lora_alpha=cfg.alpha,
                           lora_dropout=cfg.dropout, target_modules=list(cfg.target_modules), bias="none")


def wrap_lora(model: Any, cfg: LoraConfig) -> Any:
    """`model` wrapped by peft with fresh adapters: base weights frozen, only A and B trainable.

    Call it after `gradient_checkpointing_enable()`: peft then makes the (frozen) embedding output
    require grad, so checkpointed blocks still pass gradients on to the adapters. Logs how many
    parameters train. Returns the PeftModel; its `get_base_model()` is `model`, changed in place.
    """
    import peft

    try:
        wrapped = peft.get_peft_model(model, peft_config(cfg))
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise ConfigError(f"model.lora.target_modules={list(cfg.target_modules)} do not fit "
                          f"{type(model).__name__}: {err}; name its linear layers, e.g. q_proj, v_proj") from err
    trainable, total = trainable_parameters(wrapped)
    log.info("LoRA r=%d alpha=%d on %s: %d trainable of %d parameters (%.3f%%)", cfg.r, cfg.alpha,
             ",".join(cfg.target_modules), trainable, total, 100.0 * trainable / max(1, total))
    return wrapped


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(parameters with requires_grad, all parameters) of `model` (`parameters()` yields tied ones once)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def adapter_state(peft_model: Any) -> dict[str, Any]:
    """The adapter's tensors (A and B of every targeted layer), under peft's saved names."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(peft_model)


def check_adapter_config(folder: Path, cfg: LoraConfig) -> None:
    """CheckpointError when the adapter saved in `folder` was trained with another r, alpha or targets."""
    saved = json.loads((folder / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    wrong = [f"{ours}={saved.get(theirs)} (run has {getattr(cfg, ours)})"
             for theirs, ours in _SHAPE_KEYS.items() if saved.get(theirs) != getattr(cfg, ours)]
    saved_targets = saved.get("target_modules")
    saved_targets = sorted(saved_targets) if isinstance(saved_targets, list) else saved_targets
    if saved_targets != sorted(cfg.target_modules):
        wrong.append(f"target_modules={saved_targets} (run has {sorted(cfg.target_modules)})")
    if wrong:
        raise CheckpointError(
            f"the adapter in {folder} was trained with {'; '.join(wrong)}; set model.lora to match "
            "it to resume, or use a new run name (run.name=...) to start afresh")


def load_adapter_weights(folder: Path, peft_model: Any) -> None:
    """Load the adapter saved in `folder` into `peft_model`, strictly (same tensor names and shapes)."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    if not (folder / ADAPTER_WEIGHTS_FILE).is_file():
        raise CheckpointError(f"{folder} has {ADAPTER_CONFIG_FILE} but no {ADAPTER_WEIGHTS_FILE}: an incomplete adapter")
    saved = load_peft_weights(str(folder), device="cpu")
    expected = adapter_state(peft_model)
    missing, unexpected = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    wrong_shape = sorted(k for k in expected.keys() & saved.keys() if expected[k].shape != saved[k].shape)
    if missing or unexpected or wrong_shape:
        raise CheckpointError(
            f"the adapter in {folder} does not fit the model (missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"wrong shape {wrong_shape[:4]}): was it trained on another base model or LoRA config?")
    set_peft_model_state_dict(peft_model, saved)


def adapters_off(peft_model: Any) -> AdapterOffView:
    """A view of `peft_model` computing the frozen base model W x (no second copy in memory)."""
    return AdapterOffView(peft_model)


class _Off:
    """Calls `module` with the adapters of `peft_model` switched off."""

    def __init__(self, peft_model: Any, module: Any) -> None:
        self._peft, self._module = peft_model, module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._peft.disable_adapter():
            return self._module(*args, **kwargs)


class AdapterOffView:
    """The reference model of a LoRA run: the same modules, each call made under `disable_adapter()`.

    Offers what the log-prob code uses of a causal LM — `parameters()`, `base_model(...)` (the
    decoder), `get_output_embeddings()` (the head) and calling the model — so KL against the
    starting point costs no extra memory. Read-only: it never trains (callers use no_grad).
    """

    def __init__(self, peft_model: Any) -> None:
        self._peft = peft_model
        self._model = peft_model.get_base_model()

    def parameters(self, recurse: bool = True) -> Any:
        return self._model.parameters(recurse)

    @property
    def base_model(self) -> _Off:
        return _Off(self._peft, self._model.base_model)

    def get_output_embeddings(self) -> _Off:
        return _Off(self._peft, self._model.get_output_embeddings())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Off(self._peft, self._model)(*args, **kwargs)

    def adapters_disabled(self) -> AbstractContextManager[Any]:
        """The context in which the wrapped model computes the base model."""
        return self._peft.disable_adapter()


def merged_model(base: Any, adapter_folder: Path) -> Any:
    """`base` with the adapter in `adapter_folder` merged in (W' = W + (α/r)·B A): a plain HF model."""
    from peft import PeftModel

    wrapped = PeftModel.from_pretrained(base, str(adapter_folder), is_trainable=False)
    return wrapped.merge_and_unload()


def merged_state_dict(peft_model: Any) -> dict[str, torch.Tensor]:
    """The plain model's weights with every LoRA layer merged, W' = W + (α/r)·B A, as detached CPU tensors under
    the plain model's names, computed aside: the wrapped model is not touched (merging in place and back would
    leave rounding in the trained base). What a sampler holding a plain model needs (the Ray rollout workers)."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    deltas = {f"{name}.weight": sum(module.get_delta_weight(a) for a in module.active_adapters)
              for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    out = {}
    with torch.no_grad():
        for key, value in base.state_dict().items():
            if "lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            merged = value + deltas[plain].to(value.dtype) if plain in deltas else value
            out[plain] = merged.detach().to("cpu")
    return out
