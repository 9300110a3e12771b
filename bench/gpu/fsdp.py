"""Sharded training: one agentrl policy update under FSDP equal to the plain one, within a stated tolerance.

DeepSpeed is not on the GPU machine; PyTorch's FSDP is. The model is sharded with FSDP2 (`fully_shard` on
every decoder layer and on the root) over a process group of world size 1 (nccl on a GPU, gloo on the CPU):
the parameters are DTensors, every forward all-gathers them and every backward reduce-scatters the
gradients, through one rank. (FSDP1 would switch itself to NO_SHARD at world size 1.) agentrl's
`policy_update` then runs unchanged: the model is handed over inside a wrapper holding it as `.module`,
which agentrl treats like a DeepSpeed engine or DDP (its full forward runs, with `logits_to_keep` on the
model's own tokens), and an `FsdpBackend` (agentrl's TrainBackend contract) clips the DTensor gradients and
steps AdamW. The plain side is agentrl's TorchBackend on an identical copy of the weights.

    loss_rel   = |L_fsdp − L_plain| / |L_plain|                      (tolerance 1e-5)
    grad_rel   = ‖g_fsdp − g_plain‖₂ / ‖g_plain‖₂ over all parameters  (tolerance 1e-4)
    update_rel = ‖Δθ_fsdp − Δθ_plain‖₂ / ‖Δθ_plain‖₂ of the AdamW step Δθ          (tolerance 1e-3)
    param_diff = max |θ_fsdp − θ_plain| after the step, in units of the lr (reported, no target: AdamW's first
                 step moves each weight by lr·g/(|g| + 1e-8), so a weight whose gradient is at the level of
                 summation noise (|g| ~ 1e-9) moves by an arbitrary fraction of lr on each side; the H200 run
                 measured 0.14 lr there with grad_rel 1.8e-6, which the 1% target it had then called a failure)
fp32 with TF32 off: the two sides differ only in summation order.
"""

from __future__ import annotations

import copy
import os
import socket
from typing import Any

import torch

from bench.gpu.engine_checks import strict_fp32
from bench.gpu.record import Figures
from bench.gpu.shapes import Shape, build_random

LR = 1e-5
TOLERANCES = {"loss_rel": 1e-5, "grad_rel": 1e-4, "update_rel": 1e-3, "param_diff_in_lr": None}


def bool_logits_to_keep() -> bool:
    """Whether this transformers applies the head only where a boolean [B, L] `logits_to_keep` is True (output
    [N, V]), which agentrl's wrapped forward (DeepSpeed, DDP, here FSDP) relies on."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep

        return slice_logits_to_keep(torch.zeros(1, 2, 1), torch.tensor([[True, False]])).shape == (1, 1)
    except Exception:  # noqa: BLE001 - absent or without the boolean form: either way not supported
        return False


class Wrapped(torch.nn.Module):
    """The sharded model as `.module`: agentrl then runs its full forward (training.logprobs.is_wrapper). Where
    transformers lacks the boolean `logits_to_keep`, the head runs on every position and the mask selects after
    (the same values, more work)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module, self.native_mask = module, bool_logits_to_keep()

    def forward(self, logits_to_keep: Any = 0, **kwargs: Any) -> Any:
        masked = isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dtype == torch.bool
        if not masked or self.native_mask:
            return self.module(logits_to_keep=logits_to_keep, **kwargs)
        out = self.module(logits_to_keep=0, **kwargs)
        out.logits = out.logits[logits_to_keep]
        return out


class FsdpBackend:
    """agentrl's TrainBackend contract over an FSDP2 model: backward, clip the global norm of the DTensor
    gradients, AdamW step, schedule step, clear; the norm before clipping."""

    steps_without_backward = True

    def __init__(self, model: torch.nn.Module, optimizer: Any, scheduler: Any, grad_clip: float) -> None:
        self.model, self.optimizer, self.scheduler, self.grad_clip = model, optimizer, scheduler, grad_clip

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])


class GradCapture:
    """Any backend, keeping the full gradients of `model` as they are just before each step."""

    def __init__(self, inner: Any, model: torch.nn.Module) -> None:
        self.inner, self.model = inner, model
        self.grads: dict[str, torch.Tensor] = {}
        self.steps_without_backward = getattr(inner, "steps_without_backward", False)

    def backward(self, loss: torch.Tensor) -> None:
        self.inner.backward(loss)

    def step(self) -> float:
        self.grads = {n: _full(p.grad).detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        return self.inner.step()

    @property
    def lr(self) -> float:
        return self.inner.lr


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def process_group(device: torch.device) -> Any:
    """A world-size-1 process group (nccl on a GPU, gloo on the CPU) and its 1-rank device mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=0, world_size=1)
    return init_device_mesh(device.type, (1,))


def shard(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """fully_shard every decoder layer, then the root (embedding, final norm and the tied head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def one_update(model: torch.nn.Module, forward_model: torch.nn.Module, backend_of: Any, trajs: list[Any],
               pad_id: int, micro_tokens: int) -> tuple[dict[str, float], GradCapture]:
    """agentrl's policy_update (GRPO, PPO-clip, token-mean, fp32) through the given backend; metrics, grads."""
    from agentrl_core.config import AlgorithmConfig, OptimConfig
    from agentrl_core.training.optim import build_optimizer
    from agentrl_core.training.policy_update import UpdateContext, policy_update

    opt, sched = build_optimizer(model, OptimConfig(lr=LR), 1)
    capture = GradCapture(backend_of(model, opt, sched), model)
    ctx = UpdateContext(forward_model, opt, sched, AlgorithmConfig(), grad_clip=1.0, micro_batch_tokens=micro_tokens,
                        pad_id=pad_id, autocast="float32", backend=capture, shared_prefix=False)
    return policy_update(ctx, trajs), capture


def fsdp_equivalence(figs: Figures, shape: Shape, tokenizer: Any, device: torch.device, trajs: list[Any],
                     micro_tokens: int) -> None:
    """One update plain and one under FSDP2 from the same weights on the same batch; the three differences."""
    import torch.distributed as dist

    from agentrl_core.training.backends import TorchBackend

    with strict_fp32():
        plain = build_random(shape, device, tokenizer=tokenizer).train()
        sharded = copy.deepcopy(plain)
        start = {n: p.detach().clone() for n, p in plain.named_parameters()}
        pad = int(tokenizer.pad_token_id)
        m_plain, g_plain = one_update(plain, plain, lambda m, o, s: TorchBackend(m, o, s, 1.0), trajs, pad,
                                      micro_tokens)
        mesh = process_group(device)
        try:
            shard(sharded, mesh)
            m_fsdp, g_fsdp = one_update(sharded, Wrapped(sharded), lambda m, o, s: FsdpBackend(m, o, s, 1.0), trajs,
                                        pad, micro_tokens)
            diffs = compare(plain, sharded, m_plain, m_fsdp, g_plain.grads, g_fsdp.grads, start)
        finally:
            dist.destroy_process_group()
    note = (f"FSDP2 fully_shard over a world-size-1 {'nccl' if device.type == 'cuda' else 'gloo'} group (one GPU: "
            "the all-gather and reduce-scatter run through one rank); fp32, TF32 off; boolean logits_to_keep "
            + ("supported" if bool_logits_to_keep() else "NOT supported by this transformers (head on every position)"))
    for key, value in diffs.items():
        figs.add(f"fsdp/{key}", float(f"{value:.3e}"),
                 target=("<=", TOLERANCES[key]) if TOLERANCES[key] is not None else None,
                 note=note if key == "loss_rel" else "")


def compare(plain: torch.nn.Module, sharded: torch.nn.Module, m_plain: dict[str, float], m_fsdp: dict[str, float],
            g_plain: dict[str, torch.Tensor], g_fsdp: dict[str, torch.Tensor],
            start: dict[str, torch.Tensor]) -> dict[str, float]:
    """loss_rel, grad_rel, update_rel and param_diff_in_lr (module docstring) of the two updated models."""
    loss_rel = abs(m_fsdp["loss"] - m_plain["loss"]) / max(abs(m_plain["loss"]), 1e-12)
    num = sum(float((g_fsdp[n] - g).pow(2).sum()) for n, g in g_plain.items())
    den = sum(float(g.pow(2).sum()) for g in g_plain.values())
    params = dict(sharded.named_parameters())
    worst = max(float((_full(params[n].data) - p.data).abs().max()) for n, p in plain.named_parameters())
    # both started from the same weights, so θ_fsdp − θ_plain = Δθ_fsdp − Δθ_plain; Δθ_plain = θ_plain − θ_0
    off = sum(float((_full(params[n].data) - p.data).pow(2).sum()) for n, p in plain.named_parameters())
    moved = sum(float((p.data - start[n]).pow(2).sum()) for n, p in plain.named_parameters())
    return {"loss_rel": loss_rel, "grad_rel": (num / max(den, 1e-30)) ** 0.5,
            "update_rel": (off / max(moved, 1e-30)) ** 0.5, "param_diff_in_lr": worst / LR}
