"""Training backends: plain torch against hand-computed AdamW; DeepSpeed ZeRO-2/3 for real on its CPU accelerator."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl_core.config import DeepSpeedConfig, OptimConfig, TrainerConfig
from agentrl_core.training.backends import (
    TorchBackend,
    TrainBackend,
    build_backend,
    deepspeed_backend,
)
from agentrl_core.training.backends.base import BackendUnavailableError
from agentrl_core.training.backends.deepspeed_config import deepspeed_config
from agentrl_core.training.optim import lr_factor

HAS_DEEPSPEED = deepspeed_backend.importlib.util.find_spec("deepspeed") is not None


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg)


def tiny_tokenizer() -> Any:
    """A word-level tokenizer over the tiny model's 256 ids, built locally (nothing downloads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(254)} | {"[UNK]": 254, "</s>": 255}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="</s>")


def micro_batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (2, 8), generator=g), torch.randint(0, 256, (3, 6), generator=g)]


# -- DeepSpeed config dict ---------------------------------------------------------------------
def test_config_zero2_plain() -> None:
    cfg = deepspeed_config(DeepSpeedConfig(zero_stage=2, bf16=False), OptimConfig(lr=1e-3, grad_clip=0.5),
                           micro_batch_size=4, world_size=2)
    assert cfg["zero_optimization"]["stage"] == 2
    assert "offload_optimizer" not in cfg["zero_optimization"] and "optimizer" not in cfg
    assert cfg["gradient_clipping"] == 0.5 and cfg["bf16"] == {"enabled": False}
    assert cfg["train_micro_batch_size_per_gpu"] == 4 and cfg["train_batch_size"] == 8
    assert cfg["gradient_accumulation_steps"] == 1 and cfg["managed_gradient_accumulation"] is False


def test_config_zero3_offload_bf16() -> None:
    ds = DeepSpeedConfig(zero_stage=3, offload_optimizer=True, offload_params=True, pin_memory=False)
    cfg = deepspeed_config(ds, OptimConfig(lr=2e-5, betas=(0.9, 0.95), weight_decay=0.1))
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert "stage3_max_live_parameters" in zero and "allgather_bucket_size" not in zero
    assert cfg["bf16"] == {"enabled": True}
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.95], "eps": 1e-8,
                                                            "weight_decay": 0.1}}


def test_param_offload_needs_zero3() -> None:
    with pytest.raises(ValueError, match="offload_params needs zero_stage=3"):
        DeepSpeedConfig(zero_stage=2, offload_params=True)


# -- clear errors ------------------------------------------------------------------------------
def test_missing_deepspeed_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = deepspeed_backend.importlib.util.find_spec
    monkeypatch.setattr(deepspeed_backend.importlib.util, "find_spec",
                        lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(BackendUnavailableError, match=r"pip install 'agentrl\[deepspeed\]'"):
        build_backend(TrainerConfig(backend="deepspeed"), tiny_model(), OptimConfig(), 4)


@pytest.mark.skipif(torch.cuda.is_available() or not HAS_DEEPSPEED, reason="needs DeepSpeed and no CUDA")
def test_no_cuda_is_refused_unless_allow_cpu() -> None:
    with pytest.raises(BackendUnavailableError, match="needs a CUDA GPU.*allow_cpu=true"):
        build_backend(TrainerConfig(backend="deepspeed"), tiny_model(), OptimConfig(), 4)
    with pytest.raises(BackendUnavailableError, match="nothing to offload"):
        deepspeed_backend.import_deepspeed(DeepSpeedConfig(allow_cpu=True, offload_optimizer=True))


@pytest.mark.skipif(torch.cuda.is_available() or not HAS_DEEPSPEED, reason="needs DeepSpeed and no CUDA")
def test_on_the_cpu_deepspeed_never_compiles_its_inference_all_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    deepspeed = deepspeed_backend.import_deepspeed(DeepSpeedConfig(allow_cpu=True))
    import importlib

    from deepspeed.ops.op_builder.builder import OpBuilder

    ds_comm = importlib.import_module("deepspeed.comm.torch")  # (`deepspeed.comm.torch` the attribute is torch)

    def no_build(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        raise AssertionError(f"DeepSpeed tried to build {self.NAME}")

    monkeypatch.setattr(OpBuilder, "load", no_build)
    assert deepspeed.ops.__compatible_ops__[deepspeed_backend.SHM_COMM_OP] is False
    assert ds_comm.build_shm_op() is None  # what deepspeed.comm's TorchBackend asks for when it starts


# -- torch backend -----------------------------------------------------------------------------
def test_torch_backend_matches_hand_computed_adamw(tmp_path: Path) -> None:
    optim = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=2, grad_clip=0.05)
    model, ref = tiny_model(), tiny_model()
    backend = build_backend(TrainerConfig(), model, optim, total_steps=10)
    assert isinstance(backend, TorchBackend) and isinstance(backend, TrainBackend)
    assert backend.lr == pytest.approx(optim.lr * lr_factor(0, 10, optim))  # 1e-2 * 1/2
    for ids in micro_batches():
        backend.backward(backend.module(input_ids=ids, labels=ids).loss)
    norm = backend.step()
    # by hand: the summed micro-batch gradients, their global norm, clip, one AdamW step (t=1)
    for ids in micro_batches():
        ref(input_ids=ids, labels=ids).loss.backward()
    grads = {n: p.grad for n, p in ref.named_parameters()}
    expected = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    assert norm == pytest.approx(expected, rel=1e-5) and norm > optim.grad_clip
    lr0, scale = optim.lr * 0.5, optim.grad_clip / (expected + 1e-6)
    for name, p in ref.named_parameters():
        g = grads[name] * scale
        m_hat, v_hat = g, g * g  # bias-corrected first step: m/(1-b1) = g, v/(1-b2) = g^2
        want = p.detach() * (1 - lr0 * optim.weight_decay) - lr0 * m_hat / (v_hat.sqrt() + 1e-8)
        torch.testing.assert_close(dict(model.named_parameters())[name].detach(), want, rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())
    assert backend.lr == pytest.approx(optim.lr) and backend.steps_done == 1


def test_torch_backend_save_load_roundtrip(tmp_path: Path) -> None:
    optim = OptimConfig(lr=1e-3)
    backend = TorchBackend.build(tiny_model(), optim, 4)
    ids = micro_batches()[0]
    backend.backward(backend.module(input_ids=ids, labels=ids).loss)
    backend.step()
    path = backend.save(tmp_path / "ckpts", 1, {"note": "x"})
    other = TorchBackend.build(tiny_model(seed=5), optim, 4)
    state = other.load(path)
    assert state["step"] == 1 and state["note"] == "x" and other.steps_done == 1
    for (n, a), (_, b) in zip(backend.named_weights(), other.named_weights()):
        torch.testing.assert_close(a, b, msg=n)
    assert other.optimizer.state_dict()["state"][0]["step"] == 1


# -- DeepSpeed on its CPU accelerator, in a child process (its global state would leak) ----------
DS_SCRIPT = r'''
import json, math, sys
import torch
from agentrl_core.checkpoints import convert_to_hf
from agentrl_core.config import DeepSpeedConfig, OptimConfig
from agentrl_core.training.backends.deepspeed_backend import DeepSpeedBackend
from agentrl_core.training.backends.torch_backend import TorchBackend
from safetensors.torch import load_file
from tests.training.test_backends import micro_batches, tiny_model, tiny_tokenizer

out, root = {}, sys.argv[1]
optim = OptimConfig(lr=1e-2, warmup_steps=1, grad_clip=0.05)
for stage in (2, 3):
    ds = DeepSpeedConfig(zero_stage=stage, bf16=False, allow_cpu=True)
    back = DeepSpeedBackend(tiny_model(), ds, optim, 10, gradient_checkpointing=(stage == 3),
                            tokenizer=tiny_tokenizer())
    ref = TorchBackend.build(tiny_model(), optim, 10)
    norms = []
    for b in (back, ref):  # ZeRO-2 may forward through the bare HF model; ZeRO-3 must go through the engine
        for ids in micro_batches():
            fwd = b.model if stage == 2 else b.module
            b.backward(fwd(input_ids=ids, labels=ids).loss)
        norms.append(b.step())
    got = dict(back.named_weights())
    diff = max(float((got[n] - p).abs().max()) for n, p in ref.model.named_parameters())
    folder = back.save(f"{root}/z{stage}", 1, {"note": stage}).parent
    hf = convert_to_hf(folder, f"{root}/hf{stage}")
    conv = load_file(f"{hf}/model.safetensors")
    conv_diff = max(float((conv[n] - got[n]).abs().max()) for n in got)
    fresh = DeepSpeedBackend(tiny_model(seed=7), ds, optim, 10)
    state = fresh.load(folder)
    load_diff = max(float((a - got[n]).abs().max()) for n, a in fresh.named_weights())
    out[stage] = dict(norm=norms[0], ref_norm=norms[1], weight_diff=diff, lr=back.lr, ref_lr=ref.lr,
                      conv_diff=conv_diff, load_diff=load_diff, state=state, steps=fresh.steps_done,
                      gc=bool(back.model.is_gradient_checkpointing))
print("RESULT" + json.dumps(out))
'''


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed (pip install 'agentrl[deepspeed]')")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-accelerator check; GPU runs use test_deepspeed_gpu")
def test_deepspeed_zero2_zero3_on_cpu_match_torch(tmp_path: Path) -> None:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", DS_SCRIPT, str(tmp_path)], capture_output=True, text=True, check=False,
                          env=env, timeout=300, cwd=Path(__file__).resolve().parents[2])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    for stage, r in json.loads(lines[-1][len("RESULT"):]).items():
        assert r["norm"] == pytest.approx(r["ref_norm"], rel=1e-4), stage
        assert r["norm"] > 0.05  # so clipping was active and matched too
        assert r["weight_diff"] < 1e-5, stage
        assert r["lr"] == pytest.approx(r["ref_lr"]) and r["lr"] == pytest.approx(1e-2)
        assert r["conv_diff"] == 0.0, stage  # agentrl convert reads what DeepSpeed wrote, exactly
        assert r["load_diff"] == 0.0 and r["state"]["note"] == int(stage) and r["steps"] == 1
        assert r["gc"] is (stage == "3")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not HAS_DEEPSPEED, reason="needs CUDA and DeepSpeed")
def test_deepspeed_gpu_bf16_offload_step(tmp_path: Path) -> None:
    optim = OptimConfig(lr=1e-3)
    ds = DeepSpeedConfig(zero_stage=3, offload_optimizer=True, offload_params=True, bf16=True)
    backend = build_backend(TrainerConfig(backend="deepspeed", deepspeed=ds), tiny_model(), optim, 4,
                            gradient_checkpointing=True)
    ids = micro_batches()[0].cuda()
    before = {n: w.float().clone() for n, w in backend.named_weights()}
    backend.backward(backend.module(input_ids=ids, labels=ids).loss)
    norm = backend.step()
    assert math.isfinite(norm) and norm > 0
    assert any(not torch.equal(before[n], w.float()) for n, w in backend.named_weights())
    assert (backend.save(tmp_path, 1).parent / "latest").is_file()
