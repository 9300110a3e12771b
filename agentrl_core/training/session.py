"""A training stage's state: model, optimizer, schedule, metrics, checkpoints and resume.

With `model.lora.enabled` the model loaded from `init_model` is wrapped by peft before the
optimizer is built, so AdamW holds only the adapters. `session.model` is still the Hugging Face
model the loops run (peft injects the LoRA layers into it); `session.adapter` is the PeftModel
around it, which checkpoints save (the adapter only) and which can switch the adapters off.
A LoRA checkpoint stores the adapter, not the base: resume loads the base from `init_model`
again (recorded as `base_model` in the trainer state) and the adapter from the checkpoint.

With `trainer.backend=deepspeed` a DeepSpeed engine owns the optimizer (`session.backend`); a
checkpoint then holds the full weights in the usual `model/` folder (gathered under ZeRO-3, so
export and `from_pretrained` work unchanged) plus DeepSpeed's own engine, optimizer and schedule
state in `deepspeed/`, both written before the COMPLETE marker; resume loads both.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from agentrl_core.checkpoints import (
    latest_checkpoint,
    load_checkpoint,
    resolve_resume,
    save_checkpoint,
)
from agentrl_core.checkpoints.layout import STATE_FILE, parse_step, step_dir
from agentrl_core.config import LoraConfig, OptimConfig, TrainerConfig
from agentrl_core.errors import CheckpointError, ConfigError, DiskFullError
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.lora import (
    check_adapter_config,
    is_adapter_folder,
    load_adapter_weights,
    wrap_lora,
)
from agentrl_core.training.backends import TorchBackend, TrainBackend, build_backend
from agentrl_core.training.data_parallel import barrier, from_rank_zero, rank_and_world
from agentrl_core.training.metrics_log import MetricsWriter, NullWriter
from agentrl_core.training.optim import build_optimizer

log = logging.getLogger(__name__)

DEEPSPEED_DIR = "deepspeed"
"""Sub-folder of a checkpoint holding DeepSpeed's engine/optimizer/schedule state (backend=deepspeed)."""


StepCallback = Callable[[int, int, dict[str, float]], None]
"""on_step(step, total_steps, metrics) after each optimizer step of a stage (progress reporting)."""


@dataclass
class StageResult:
    """What a finished stage hands on: its last checkpoint and summary metrics."""

    stage: str
    checkpoint: str
    steps: int
    resumed_from: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainingSession:
    """Everything a stage loop needs, restored from the last complete checkpoint when there is one."""

    stage_dir: Path
    init_model: str
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    total_steps: int
    start_step: int
    writer: MetricsWriter | NullWriter
    started: float = field(default_factory=time.time)
    adapter: Any | None = None
    """The PeftModel around `model` when training LoRA adapters, else None."""
    lora: LoraConfig | None = None
    """The LoRA settings of the run when `adapter` is set."""
    backend: TrainBackend | None = None
    """Backward and optimizer step: a TorchBackend over `optimizer`/`scheduler`, or a DeepSpeedBackend."""

    @property
    def ckpt_root(self) -> Path:
        return self.stage_dir / "checkpoints"

    @property
    def forward_model(self) -> Any:
        """What the training forward runs on: `model`, or the DeepSpeed engine under ZeRO-3."""
        return self.backend.forward_module if self.backend is not None else self.model

    @property
    def uses_deepspeed(self) -> bool:
        return self.backend is not None and not isinstance(self.backend, TorchBackend)

    def save(self, step: int, keep_last: int, extra: dict[str, Any] | None = None) -> Path:
        """Write a complete, atomic checkpoint for `step` (with several ranks: rank 0 writes it, every rank its
        DeepSpeed shard)."""
        if self._follower():
            return self._follow(step, engine_state=True, final=step_dir(self.ckpt_root, step))
        state = {"step": step, "init_model": self.init_model, "total_steps": self.total_steps, **(extra or {})}
        if self.adapter is not None:  # the checkpoint holds the adapter; resume and export need the base
            state.update(base_model=self.init_model, lora=self.lora)
        if self.uses_deepspeed:
            state.update(backend="deepspeed", data_parallel_ranks=rank_and_world()[1])
            return save_checkpoint(self.ckpt_root, step, model=_DeepSpeedWriter(self.backend, step),
                                   tokenizer=self.tokenizer, state=state, keep_last=keep_last)
        return save_checkpoint(self.ckpt_root, step, model=self.adapter if self.adapter is not None else self.model,
                               tokenizer=self.tokenizer, optimizer=self.optimizer, scheduler=self.scheduler,
                               state=state, keep_last=keep_last)

    def save_best(self, root: Path, step: int, extra: dict[str, Any] | None = None) -> Path:
        """Write the current weights as the only checkpoint under `root` (no optimizer state: it is for
        export, not for resuming); returns its folder."""
        if self._follower():
            return self._follow(step, engine_state=False, final=step_dir(root, step))
        state = {"step": step, "init_model": self.init_model, "total_steps": self.total_steps, **(extra or {})}
        if self.adapter is not None:
            state.update(base_model=self.init_model, lora=self.lora)
        model = _DeepSpeedWriter(self.backend, step, engine_state=False) if self.uses_deepspeed else (
            self.adapter if self.adapter is not None else self.model)
        return save_checkpoint(root, step, model=model, tokenizer=self.tokenizer, state=state, keep_last=1)

    def _follower(self) -> bool:
        """Whether this is a DeepSpeed rank other than 0 of several (it follows rank 0's saves)."""
        rank, world = rank_and_world()
        return self.uses_deepspeed and world > 1 and rank != 0

    def _follow(self, step: int, engine_state: bool, final: Path) -> Path:
        """A rank other than 0 in rank 0's save of `step`: the folder rank 0 writes comes by broadcast."""
        folder = Path(from_rank_zero(None, rank_and_world()[1]))
        _save_deepspeed_parts(self.backend, folder, step, engine_state)
        return final

    @contextmanager
    def resume_hint(self) -> Iterator[None]:
        """On a full disk, complete the DiskFullError with the step that running the same command again
        resumes from (the last complete checkpoint's; 0 when there is none)."""
        try:
            yield
        except DiskFullError as err:
            latest = latest_checkpoint(self.ckpt_root)
            err.resume_step = (parse_step(latest) or 0) if latest is not None else 0
            raise

    def last_checkpoint(self) -> Path:
        path = latest_checkpoint(self.ckpt_root)
        if path is None:
            raise CheckpointError(f"{self.ckpt_root}: no complete checkpoint was written")
        return path


def open_session(stage_dir: Path, init_model: Path, optim: OptimConfig, total_steps: int, *,
                 resume: str, dtype: str = "float32", gradient_checkpointing: bool = False,
                 lora: LoraConfig | None = None, trainer: TrainerConfig | None = None,
                 device: str = "cpu", write_metrics: bool = True) -> TrainingSession:
    """Load the model (from the last checkpoint when resuming, else `init_model`) onto `device` and its optimizer.

    With `lora.enabled` the base always comes from `init_model` and gets fresh adapters (before
    the optimizer is built, so only they train); a resumed run then loads the checkpoint's adapter.
    `trainer.backend` picks plain torch (also when `trainer` is None) or DeepSpeed. `write_metrics` False: the
    session logs nothing (a trainer rank other than 0).
    """
    stage_dir.mkdir(parents=True, exist_ok=True)
    deepspeed = trainer is not None and trainer.backend == "deepspeed"
    use_lora = lora is not None and lora.enabled
    if deepspeed and use_lora:
        raise ConfigError("model.lora.enabled with trainer.backend=deepspeed is not supported (the adapter "
                          "checkpoints and the reference model without adapters assume plain torch); "
                          "set trainer.backend=torch for LoRA, or turn LoRA off to use DeepSpeed")
    ckpt = resolve_resume(stage_dir / "checkpoints", resume)
    if ckpt is not None:  # refuse a foreign checkpoint before loading anything
        _check_same_kind(ckpt, use_lora)
        _check_same_run(_saved_state(ckpt), init_model, ckpt)
        _check_same_backend(ckpt, deepspeed)
    source = ckpt / "model" if ckpt is not None and not use_lora else init_model
    model = load_model(source, dtype=dtype, device=device)
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    adapter = wrap_lora(model, lora) if use_lora else None  # after checkpointing is on, before the optimizer
    if adapter is not None and ckpt is not None:
        check_adapter_config(ckpt / "model", lora)
        load_adapter_weights(ckpt / "model", adapter)
    tokenizer = load_tokenizer(source)  # training never changes it; a LoRA checkpoint's copy is for export
    if deepspeed:
        backend = build_backend(trainer, model, optim, total_steps, tokenizer=tokenizer)
        optimizer, scheduler = backend.optimizer, backend.scheduler
    else:
        optimizer, scheduler = build_optimizer(model, optim, total_steps)
        backend = TorchBackend(model, optimizer, scheduler, optim.grad_clip, tokenizer=tokenizer,
                               save_model=adapter if adapter is not None else model)
    start = 0
    if ckpt is not None:
        if deepspeed:  # DeepSpeed's state first; then trainer state and RNG from our files
            _check_same_ranks(ckpt)
            backend.load(ckpt / DEEPSPEED_DIR)
            state = load_checkpoint(ckpt)
        else:
            state = load_checkpoint(ckpt, optimizer=optimizer, scheduler=scheduler)
        start = int(state["step"])
        log.info("resuming %s from step %d (%s)", stage_dir.name, start, ckpt)
    writer = MetricsWriter(stage_dir, resume_step=start) if write_metrics else NullWriter()
    return TrainingSession(stage_dir, str(init_model), model, tokenizer, optimizer, scheduler, total_steps, start, writer,
                           adapter=adapter, lora=lora if use_lora else None, backend=backend)


class _DeepSpeedWriter:
    """Stands in for the model in `save_checkpoint`: the HF weights into `model/`, DeepSpeed's state beside it.

    `save_checkpoint` calls `save_pretrained(<tmp>/model)` inside its atomic folder, before the marker, so both
    land in the step folder or neither does. With several ranks (trainer workers) rank 0 runs `save_checkpoint`
    and hands the folder it writes to the others (`TrainingSession._follow`): every rank takes part in the
    collective parts (ZeRO-3's gathers, DeepSpeed's shards into `deepspeed/`), only rank 0 writes the rest.
    """

    def __init__(self, backend: Any, step: int, engine_state: bool = True) -> None:
        self.backend, self.step, self.engine_state = backend, step, engine_state

    def save_pretrained(self, folder: Path, safe_serialization: bool = True) -> None:
        _save_deepspeed_parts(self.backend, Path(from_rank_zero(str(folder), rank_and_world()[1])), self.step,
                              self.engine_state)


def _save_deepspeed_parts(backend: Any, folder: Path, step: int, engine_state: bool) -> None:
    """On every rank: the HF weights (written by rank 0) and DeepSpeed's shards, then wait for all."""
    backend.save_hf(folder)
    if engine_state:
        backend.save(folder.parent / DEEPSPEED_DIR, step)
    barrier(rank_and_world()[1])


def _check_same_backend(ckpt: Path, deepspeed: bool) -> None:
    """A DeepSpeed run resumes only from checkpoints with DeepSpeed's state, a torch run only from ones without."""
    if (ckpt / DEEPSPEED_DIR).is_dir() != deepspeed:
        held, asked = ("DeepSpeed", "torch") if not deepspeed else ("plain torch", "deepspeed")
        raise CheckpointError(
            f"{ckpt} holds {held} optimizer state but trainer.backend is {asked} for this run; set it as the "
            "run was started, or use a new run name (run.name=...) to start afresh")


def _check_same_ranks(ckpt: Path) -> None:
    """A DeepSpeed checkpoint holds one ZeRO shard per rank: it resumes only over as many ranks as wrote it."""
    saved, world = int(_saved_state(ckpt).get("data_parallel_ranks", 1)), rank_and_world()[1]
    if saved != world:
        raise CheckpointError(
            f"{ckpt} was written by {saved} trainer worker(s) and this run has {world}: DeepSpeed's ZeRO state is one "
            f"shard per rank and resumes only over as many ranks; set distributed.trainer_workers={saved} to resume, "
            "or export it (`agentrl export`) and start a new run (run.name=...) from the exported model")


def _check_same_kind(ckpt: Path, use_lora: bool) -> None:
    """A LoRA run resumes only from adapter checkpoints, a full run only from full-weight ones."""
    if is_adapter_folder(ckpt / "model") != use_lora:
        held, asked = ("a LoRA adapter", "off") if not use_lora else ("full model weights", "on")
        raise CheckpointError(
            f"{ckpt} holds {held} but model.lora.enabled is {asked} for this run; set it as the run "
            "was started, or use a new run name (run.name=...) to start afresh")


def _saved_state(ckpt: Path) -> dict[str, Any]:
    """The checkpoint's trainer state, or {} when it has none (load_checkpoint then says what is missing)."""
    path = ckpt / STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _check_same_run(state: dict[str, Any], init_model: Path, ckpt: Path) -> None:
    for key in ("init_model", "base_model"):
        if state.get(key) not in (None, str(init_model)):
            raise CheckpointError(
                f"{ckpt} continues a run that started from {state[key]}, not {init_model}; "
                "use a new run name (run.name=...) or delete the run folder to start afresh")
