"""The DeepSpeed ZeRO-2/3 backend: engine.backward/step, offload, bf16, DeepSpeed's checkpoints."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from agentrl_core.config import DeepSpeedConfig, OptimConfig
from agentrl_core.errors import CheckpointError
from agentrl_core.training.backends.base import BackendUnavailableError
from agentrl_core.training.backends.deepspeed_config import deepspeed_config
from agentrl_core.training.optim import lr_factor
from agentrl_core.web.ports import free_port

log = logging.getLogger(__name__)

INSTALL = "pip install 'agentrl[deepspeed]'"


def import_deepspeed(ds: DeepSpeedConfig) -> Any:
    """The `deepspeed` module, on CUDA, or on its CPU accelerator when `ds.allow_cpu`.

    DeepSpeed picks its accelerator once, when first asked; without CUDA we set
    DS_ACCELERATOR=cpu before that (an explicit DS_ACCELERATOR in the environment wins).
    """
    if importlib.util.find_spec("deepspeed") is None:
        raise BackendUnavailableError(f"trainer.backend=deepspeed needs DeepSpeed, which is not installed; "
                                      f"install it with: {INSTALL} (or set trainer.backend=torch)")
    if not torch.cuda.is_available():
        if not ds.allow_cpu:
            raise BackendUnavailableError(
                "trainer.backend=deepspeed needs a CUDA GPU and none is visible (torch.cuda.is_available() is "
                "False); use trainer.backend=torch here, or trainer.deepspeed.allow_cpu=true to run DeepSpeed on "
                "its slow CPU accelerator (tests and smoke runs only)")
        if ds.offload_optimizer or ds.offload_params:
            raise BackendUnavailableError("trainer.deepspeed offload_* moves state from the GPU to the CPU; "
                                          "without a GPU there is nothing to offload: turn them off")
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    deepspeed = importlib.import_module("deepspeed")
    if not torch.cuda.is_available():
        skip_cpu_inference_all_reduce(deepspeed.ops)
    return deepspeed


SHM_COMM_OP = "deepspeed_shm_comm"
"""DeepSpeed's shared-memory all-reduce for CPU inference (deepspeed.comm's `inference_all_reduce`)."""


def skip_cpu_inference_all_reduce(ops: Any) -> None:
    """Tell DeepSpeed its CPU shared-memory all-reduce op is unavailable, so it is never JIT-compiled.

    On its CPU accelerator, DeepSpeed's communication backend builds that C++ op (two files through g++,
    about 2 CPU-minutes) the first time a process on the machine initialises it, only to serve
    `inference_all_reduce`; ZeRO training reduces through torch.distributed (gloo) and never calls it. The
    op is dropped from `deepspeed.ops.__compatible_ops__`, the probe result DeepSpeed caches and consults
    before building (`build_shm_op` returns None for an incompatible op); nothing else changes.
    """
    ops.__compatible_ops__[SHM_COMM_OP] = False



def init_distributed(deepspeed: Any) -> None:
    """Join (or, run without a launcher, create) the process group: nccl on CUDA, gloo on CPU.

    A plain `python` run is one rank: RANK=0, WORLD_SIZE=1, MASTER_ADDR=127.0.0.1 and a free port,
    unless the launcher (deepspeed / torchrun) already set them.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def _scheduler_factory(optim: OptimConfig, total_steps: int) -> Any:
    """DeepSpeed calls this with the optimizer it built: our warm-up + decay as a LambdaLR."""
    def make(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, optim))
    return make


class DeepSpeedBackend:
    """A model under a DeepSpeed engine; the TrainBackend protocol over it.

    The engine owns the sharded fp32 master weights and optimizer states (ZeRO-2: optimizer states
    and gradients partitioned across ranks; ZeRO-3: parameters as well), casts the module to bf16
    when `bf16`, clips the global norm inside `step()` and writes ZeRO checkpoints
    (`<folder>/latest`, `<folder>/global_step<N>/`), which `agentrl convert` turns into a HF folder.

    Forward: under ZeRO-3 every micro-batch's forward must go through `module` (the engine: it
    resets ZeRO-3's per-backward bookkeeping and hooks the output); calling the bare model gives
    wrong gradients when several micro-batches accumulate (checked: norm 3.72 instead of 5.32).
    Under ZeRO-2 the bare model's forward is fine (its hooks sit on the parameters).
    """

    averages_ranks = True
    """ZeRO's reduction divides the ranks' summed gradients by their number (training.data_parallel)."""

    def __init__(self, model: Any, ds: DeepSpeedConfig, optim: OptimConfig, total_steps: int, *,
                 gradient_checkpointing: bool = False, tokenizer: Any = None, micro_batch_size: int = 1) -> None:
        deepspeed = import_deepspeed(ds)
        init_distributed(deepspeed)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self._model, self.tokenizer, self.ds = model, tokenizer, ds
        world = torch.distributed.get_world_size()
        self.config = deepspeed_config(ds, optim, micro_batch_size=micro_batch_size, world_size=world)
        client_optimizer = None if ds.offload_optimizer else torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=optim.lr, betas=optim.betas,
            weight_decay=optim.weight_decay)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=client_optimizer, config=self.config,
            lr_scheduler=_scheduler_factory(optim, total_steps), dist_init_required=False)
        self._deepspeed = deepspeed

    @property
    def module(self) -> Any:
        return self.engine

    @property
    def model(self) -> Any:
        return self._model

    @property
    def forward_module(self) -> Any:
        """The engine under ZeRO-3 (its forward is required for correct gradients), the bare model under ZeRO-2."""
        return self.engine if self.ds.zero_stage == 3 else self._model

    def save_hf(self, folder: Path) -> None:
        """The full weights (gathered under ZeRO-3) as a Hugging Face folder: config + safetensors.

        Tied weights appear once (save_pretrained drops the tied copy); dtype is the module's
        (bf16 with `bf16`, fp32 otherwise), the fp32 masters stay in DeepSpeed's own checkpoint.
        """
        state = {name: tensor.cpu() for name, tensor in self.named_weights()}
        if torch.distributed.get_rank() == 0:
            self._model.save_pretrained(folder, state_dict=state, safe_serialization=True)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate this micro-batch's gradients (DeepSpeed does not rescale: scale_wrt_gas=False)."""
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        """Reduce, clip to `gradient_clipping`, update, advance the schedule; the pre-clip global norm."""
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        self.zero_grad()
        if norm is None:
            raise RuntimeError("DeepSpeed computed no gradient norm this step (its norm computation is off); "
                               "the backend needs it for clipping and logging")
        return float(norm)

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    @property
    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    @property
    def steps_done(self) -> int:
        return int(self.engine.global_steps)

    def save(self, folder: Path, step: int, client_state: dict[str, Any] | None = None) -> Path:
        """Every rank writes its shard to `<folder>/global_step<step>/`; rank 0 also writes config + tokenizer
        beside it (where `agentrl convert` looks for them). Returns the tag folder."""
        tag = f"global_step{step}"
        self.engine.save_checkpoint(str(folder), tag=tag, client_state={"step": step, **(client_state or {})})
        if torch.distributed.get_rank() == 0:
            self._model.config.save_pretrained(folder)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(folder)
        return Path(folder) / tag

    def load(self, folder: Path) -> dict[str, Any]:
        """Restore weights, optimizer, schedule from `folder` (the tag its `latest` names); its client state."""
        path, client_state = self.engine.load_checkpoint(str(folder))
        if path is None:
            raise CheckpointError(f"DeepSpeed found no checkpoint to load in {folder} (no `latest` file or tag)")
        return dict(client_state or {})

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full tensors by HF name, one parameter gathered at a time under ZeRO-3 (a copy each)."""
        gathered = self._deepspeed.zero.GatheredParameters
        for name, param in self._model.named_parameters():
            if self.ds.zero_stage == 3:
                with gathered([param], modifier_rank=None):
                    yield name, param.detach().clone()
            else:
                yield name, param.detach()
        persistent = set(self._model.state_dict().keys())
        for name, buf in self._model.named_buffers():
            if name in persistent:  # not rotary caches and other non-persistent buffers
                yield name, buf.detach()
