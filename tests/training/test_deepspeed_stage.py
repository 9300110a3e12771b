"""trainer.backend=deepspeed wired into the GRPO and SFT stages (ZeRO-2 and ZeRO-3 on DeepSpeed's CPU accelerator).

DeepSpeed's process group and accelerator are process-global, so everything DeepSpeed runs in one
child process (`python -m tests.training.test_deepspeed_stage ...`), which prints its measurements
as one JSON line; the tests below assert on them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-accelerator check (GPU runs differ)")]

STAGES = (2, 3)


def _overrides(model: Path, root: Path, stage: int, backend: str, steps: int) -> list[str]:
    return [f"model.name={model}", f"run.root={root}", f"trainer.steps={steps}", "trainer.save_every=2",
            "trainer.keep_last=3", "rollout.tasks_per_step=2", "rollout.group_size=2",
            "rollout.sampling.max_new_tokens=6", "env.max_turns=2", "model.compute_dtype=float32",
            "trainer.micro_batch_tokens=64", "trainer.optim.lr=1e-2", f"trainer.backend={backend}",
            f"trainer.deepspeed.zero_stage={stage}", "trainer.deepspeed.allow_cpu=true",
            "trainer.deepspeed.bf16=false", "algorithm.entropy_coef=0.01"]  # entropy: a gradient even when rewards tie


def _weights(ckpt: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(ckpt) / "model" / "model.safetensors"))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _update_vs_torch(model: Path, stage: int) -> dict[str, Any]:
    """One policy_update of the same batch (several micro-batches) with DeepSpeed and with plain torch."""
    from agentrl_core.config import (
        AlgorithmConfig,
        DeepSpeedConfig,
        OptimConfig,
        TrainerConfig,
    )
    from agentrl_core.models import load_model
    from agentrl_core.training.backends import build_backend
    from agentrl_core.training.policy_update import UpdateContext, policy_update
    from tests.training.test_training_units import batch

    optim, algo = OptimConfig(lr=1e-2, grad_clip=0.5), AlgorithmConfig(entropy_coef=0.01)
    trainer = TrainerConfig(backend="deepspeed", deepspeed=DeepSpeedConfig(zero_stage=stage, bf16=False,
                                                                           allow_cpu=True))
    out: dict[str, Any] = {}
    for name, tc in (("ds", trainer), ("torch", TrainerConfig())):
        net = load_model(model)
        net.train()
        backend = build_backend(tc, net, optim, 4)
        ctx = UpdateContext(backend.forward_module, None, None, algo, optim.grad_clip, 64, 0, backend=backend)
        metrics = policy_update(ctx, batch())
        out[name] = dict(metrics=metrics, weights={n: w.clone() for n, w in backend.named_weights()})
    return dict(grad_norm=out["ds"]["metrics"]["grad_norm"], ref_grad_norm=out["torch"]["metrics"]["grad_norm"],
                loss=out["ds"]["metrics"]["loss"], ref_loss=out["torch"]["metrics"]["loss"],
                micro_batches=out["ds"]["metrics"]["micro_batches"], lr=out["ds"]["metrics"]["lr"],
                ref_lr=out["torch"]["metrics"]["lr"],
                weight_diff=max(float((w - out["torch"]["weights"][n]).abs().max())
                                for n, w in out["ds"]["weights"].items()),
                moved=max(float((w - load_model(model).state_dict()[n]).abs().max())
                          for n, w in out["ds"]["weights"].items()))


def _grpo(model: Path, env_url: str, root: Path, stage: int) -> dict[str, Any]:
    """2 steps + resume to 3, against 3 uninterrupted steps; export of the final checkpoint."""
    from transformers import AutoModelForCausalLM

    from agentrl_core.checkpoints import export_hf
    from agentrl_core.recipes import load_recipe
    from agentrl_core.grpo import train_grpo

    def run(name: str, steps: int) -> Any:
        cfg = load_recipe("countdown_grpo", _overrides(model, root, stage, "deepspeed", steps))
        return train_grpo(cfg, init_model=model, env_url=env_url, stage_dir=root / name)

    first, resumed, whole = run("split", 2), run("split", 3), run("whole", 3)
    metrics = {k: [json.loads(x) for x in (root / k / "metrics.jsonl").read_text().splitlines()]
               for k in ("split", "whole")}
    exported = export_hf(resumed.checkpoint, root / f"export{stage}")
    hf = AutoModelForCausalLM.from_pretrained(exported)
    final = _weights(resumed.checkpoint)
    return dict(first_ckpt=first.checkpoint, resumed_from=resumed.resumed_from, steps=resumed.steps,
                ckpt_files=sorted(p.name for p in Path(resumed.checkpoint).iterdir()),
                ds_files=sorted(p.name for p in (Path(resumed.checkpoint) / "deepspeed").iterdir()),
                resume_vs_whole=_max_diff(final, _weights(whole.checkpoint)),
                moved=_max_diff(final, _weights(first.checkpoint)),
                export_diff=max(float((hf.state_dict()[k] - v).abs().max()) for k, v in final.items()),
                split_norms=[m["grad_norm"] for m in metrics["split"]],
                whole_norms=[m["grad_norm"] for m in metrics["whole"]],
                samples=[m["samples_trained"] for m in metrics["whole"]])


def _sft(model: Path, root: Path, stage: int) -> dict[str, Any]:
    """One SFT step on a conversation file, DeepSpeed vs torch."""
    from agentrl_core.recipes import load_recipe
    from agentrl_core.training.sft import train_sft

    root.mkdir(parents=True, exist_ok=True)
    data = root / "conv.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Say {w}."},
                                                     {"role": "assistant", "content": f"{w} {w} {w}"}]}) + "\n"
                            for w in ("alpha", "beta", "gamma", "delta")))
    out = {}
    for backend in ("deepspeed", "torch"):
        extra = [f"sft.dataset={data}", "sft.epochs=1", "sft.batch_size=4", "sft.optim.lr=1e-2",
                 "sft.optim.warmup_steps=0"]
        cfg = load_recipe("countdown_grpo", _overrides(model, root, stage, backend, 1) + extra)
        res = train_sft(cfg, init_model=model, env_url="http://127.0.0.1:9", stage_dir=root / f"sft-{backend}")
        out[backend] = (json.loads((root / f"sft-{backend}" / "metrics.jsonl").read_text().splitlines()[0]),
                        _weights(res.checkpoint))
    return dict(loss=out["deepspeed"][0]["loss"], ref_loss=out["torch"][0]["loss"],
                grad_norm=out["deepspeed"][0]["grad_norm"], ref_grad_norm=out["torch"][0]["grad_norm"],
                weight_diff=_max_diff(out["deepspeed"][1], out["torch"][1]))


def main(root: Path, model: Path, env_url: str) -> None:
    result: dict[str, Any] = {}
    for stage in STAGES:
        result[stage] = {}
        for part, run, args in (("update", _update_vs_torch, (model, stage)),
                                ("grpo", _grpo, (model, env_url, root / f"g{stage}", stage)),
                                ("sft", _sft, (model, root / f"s{stage}", stage))):
            start = time.perf_counter()
            result[stage][part] = run(*args)
            print(f"TIME zero{stage} {part} {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    print("RESULT" + json.dumps(result))


@pytest.fixture(scope="module")
def ds_run(tiny_model_path: Path, env_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ds-stage")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.training.test_deepspeed_stage", str(root), str(tiny_model_path),
                           env_server_url], capture_output=True, text=True, check=False, env=env, timeout=400,
                          cwd=Path(__file__).resolve().parents[2])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    shutil.rmtree(root, ignore_errors=True)  # the results are in RESULT; the runs' 0.4 GiB kept only on failure
    return json.loads(lines[-1][len("RESULT"):])


@pytest.mark.parametrize("stage", STAGES)
def test_grpo_update_equals_torch_backend(ds_run: dict[str, Any], stage: int) -> None:
    r = ds_run[str(stage)]["update"]
    assert r["micro_batches"] > 1  # gradients accumulate over micro-batches (where ZeRO-3 goes wrong without the engine)
    assert r["grad_norm"] == pytest.approx(r["ref_grad_norm"], rel=1e-4) and r["grad_norm"] > 0.5  # clipping active
    assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-5, abs=1e-7)
    assert r["lr"] == pytest.approx(r["ref_lr"])
    assert r["weight_diff"] < 1e-5 < r["moved"]


@pytest.mark.parametrize("stage", STAGES)
def test_grpo_stage_checkpoints_resumes_and_exports(ds_run: dict[str, Any], stage: int) -> None:
    r = ds_run[str(stage)]["grpo"]
    assert Path(r["first_ckpt"]).name == "step_000002" and r["resumed_from"] == 2 and r["steps"] == 3
    assert {"model", "deepspeed", "rng.pt", "trainer_state.json", "COMPLETE"} <= set(r["ckpt_files"])
    assert "optimizer.pt" not in r["ckpt_files"] and "latest" in r["ds_files"]
    assert r["split_norms"] == pytest.approx(r["whole_norms"], rel=1e-4)
    assert r["resume_vs_whole"] < 1e-5 and r["moved"] > 1e-4  # step 3 after resume = step 3 uninterrupted
    assert r["export_diff"] == 0.0 and min(r["samples"]) > 0


@pytest.mark.parametrize("stage", STAGES)
def test_sft_stage_equals_torch_backend(ds_run: dict[str, Any], stage: int) -> None:
    r = ds_run[str(stage)]["sft"]
    assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-5)
    assert r["grad_norm"] == pytest.approx(r["ref_grad_norm"], rel=1e-4)
    assert r["weight_diff"] < 1e-5


def test_lora_with_deepspeed_is_refused(tmp_path: Path, tiny_model_path: Path) -> None:
    from agentrl_core.config import LoraConfig, OptimConfig, TrainerConfig
    from agentrl_core.errors import ConfigError
    from agentrl_core.training.session import open_session

    with pytest.raises(ConfigError, match="lora.*deepspeed is not supported"):
        open_session(tmp_path, tiny_model_path, OptimConfig(), 2, resume="auto", lora=LoraConfig(enabled=True),
                     trainer=TrainerConfig(backend="deepspeed"))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
