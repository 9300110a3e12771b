"""The decoder's weights as the native engine computes with them: compute-dtype copies, made once per version.

Under bf16 autocast every matmul first casts its fp32 weight to bf16, so a decode step of a small
batch spends more time casting 135M weights than multiplying. The engine instead keeps one bf16
copy of each matrix (refreshed only when the training update changes the weights) and multiplies
with it directly; with fp32 compute the tensors are the model's own (no copy). The arithmetic
follows transformers' Llama under autocast: the residual stream and the RMSNorm statistics stay
float32, matmul inputs and outputs are in the compute dtype.

On a CPU whose oneDNN build has it, each matrix can also be prepacked for oneDNN's matmul
(the blocked layout PyTorch's own compiler uses for CPU inference), with bfloat16 results
bit-identical to `F.linear` and float32 ones different in the last bits. Whether it pays is measured once per machine
and cached (agentrl_core.rollout.native.prepack), never assumed; the packed copy is what the engine
holds then (fp32 included).

Only plain modules qualify (nn.Linear projections, RMSNorm with `weight` and `variance_epsilon`,
a gate/up/down MLP); LoRA-injected layers are not, and the forward then calls the modules under
autocast instead (`snapshot` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from agentrl_core.rollout.native.prepack import pack_weight, prepack_pays

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass
class Linear:
    """A projection's weight [out, in] and bias in the compute dtype; `packed` is its oneDNN-prepacked
    form when that is used (then `weight` is not kept)."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None
    packed: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


@dataclass
class Norm:
    """RMSNorm y = w · x / sqrt(mean(x²) + ε), statistics in float32, as transformers computes it."""

    weight: torch.Tensor
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


@dataclass
class LayerWeights:
    """One decoder layer: norms, attention projections (q/k norms for qwen3), the gated MLP."""

    input_norm: Norm
    post_norm: Norm
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    gate: Linear
    up: Linear
    down: Linear
    act: Callable[[torch.Tensor], torch.Tensor]
    q_norm: Norm | None = None
    k_norm: Norm | None = None


@dataclass
class DecoderWeights:
    """Every layer, the final norm and the output head, in `dtype`."""

    dtype: torch.dtype
    layers: list[LayerWeights]
    norm: Norm
    head: Linear


def _is_plain_linear(module: Any) -> bool:
    return type(module) is torch.nn.Linear


def _is_plain_norm(module: Any) -> bool:
    return isinstance(getattr(module, "weight", None), torch.Tensor) and hasattr(module, "variance_epsilon")


def plain_enough(model: Any) -> bool:
    """Whether every module the snapshot reads is a plain one (no LoRA wrappers, known norms)."""
    inner = model.model
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if not all(_is_plain_linear(getattr(attn, n, None)) for n in PROJECTIONS):
            return False
        if not all(_is_plain_linear(getattr(mlp, n, None)) for n in MLP) or not hasattr(mlp, "act_fn"):
            return False
        norms = [layer.input_layernorm, layer.post_attention_layernorm]
        norms += [getattr(attn, n) for n in ("q_norm", "k_norm") if hasattr(attn, n)]
        if not all(_is_plain_norm(n) for n in norms):
            return False
    return _is_plain_norm(inner.norm) and _is_plain_linear(model.lm_head)


def _linear(module: torch.nn.Linear, dtype: torch.dtype, pack: bool) -> Linear:
    w = module.weight.detach().to(dtype)
    b = module.bias.detach().to(dtype) if module.bias is not None else None
    return Linear(None, b, pack_weight(w)) if pack else Linear(w, b)


def _norm(module: Any) -> Norm:
    return Norm(module.weight.detach(), float(module.variance_epsilon))


def _layer(layer: Any, dtype: torch.dtype, pack: bool) -> LayerWeights:
    attn, mlp = layer.self_attn, layer.mlp
    qk = {n: _norm(getattr(attn, n)) for n in ("q_norm", "k_norm") if hasattr(attn, n)}
    return LayerWeights(_norm(layer.input_layernorm), _norm(layer.post_attention_layernorm),
                        *(_linear(getattr(attn, n), dtype, pack) for n in PROJECTIONS),
                        *(_linear(getattr(mlp, n), dtype, pack) for n in MLP), mlp.act_fn, **qk)


def snapshot(model: Any, dtype: torch.dtype, *, prepack: bool | None = None) -> DecoderWeights | None:
    """The model's weights in `dtype` (fp32 unpacked: the model's own tensors), prepacked for oneDNN when
    `prepack` (None: the machine's cached verdict, `prepack_pays`), or None if a module is not plain."""
    if not plain_enough(model):
        return None
    mlp = model.model.layers[0].mlp.gate_proj.weight
    if prepack is None:
        prepack = prepack_pays(dtype, tuple(mlp.shape), mlp.device)
    with torch.no_grad():
        return DecoderWeights(dtype, [_layer(layer, dtype, prepack) for layer in model.model.layers],
                              _norm(model.model.norm), _linear(model.lm_head, dtype, prepack))
