"""The two device commands as ordered phases, each with the seconds it needs (checked against the deadline).

The order is the order of value: what only command 1 can give first, the slow and optional last. The
`need` of a phase is its expected wall time on an H100 plus a margin (docs/gpu-checks.md, "Durations").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu import carry
from bench.gpu.record import Deadline, Figures, PhaseSkipped, run_phase

Phase = tuple[str, float, Callable[[], Any]]


def run_phases(figs: Figures, deadline: Deadline, phases: list[Phase], only: set[str] | None,
               after: Callable[[], None] = lambda: None) -> None:
    """Each phase (or those in `only`) under the deadline, then `after` (e.g. hand GPU memory back)."""
    for name, need, fn in phases:
        if only is None or name in only:
            run_phase(figs, deadline, name, need, fn)
            after()


def dry_skip() -> None:
    """The dry run skips the 1.5B step: the same code as the 0.5B one, at a size the CPU has no use for."""
    raise PhaseSkipped("dry run: the same code as grpo_step_0.5b")


def _tokenizer(carry_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(carry_dir / "tokenizer")


def command_1(figs: Figures, deadline: Deadline, args: argparse.Namespace, work: Path, only: set[str] | None) -> None:
    """Peak and bandwidth, part 1 stashed, GRPO steps at three sizes, greedy identity, KV budget, FSDP, loop."""
    import torch

    from bench.gpu import device as dev
    from bench.gpu import engine_checks, fsdp, loop, shapes, speed

    device = dev.pick_device(args.dry_run)
    figs.set_device(dev.facts(device))
    dry = args.dry_run
    tok = _tokenizer(args.carry)
    measured: dict[str, float] = {"peak": float("nan"), "bw": float("nan")}

    def peak() -> None:
        dtype, n = (torch.float32, 128) if dry else (torch.bfloat16, 8192)
        measured["peak"] = dev.matmul_peak_tflops(device, n, dtype)
        figs.add("card/matmul_peak_tflops", round(measured["peak"], 1), unit="TFLOP/s",
                 note=f"{n}x{n} @ {n}x{n} {str(dtype).removeprefix('torch.')}")
        measured["bw"] = dev.copy_bandwidth_gbs(device, (8 << 20) if dry else (2 << 30))
        figs.add("card/copy_bandwidth_gbs", round(measured["bw"], 1), unit="GB/s",
                 note="device-to-device copy, 2 x bytes")

    def stash() -> None:
        where = carry.stash_part(args.carry / "part1", args.stash)
        figs.add("carry/part1_stashed", str(where), note="command 2 joins it with part 2 while the machine stays warm")

    def step(shape: shapes.Shape, targets: bool) -> Callable[[], None]:
        size = speed.DRY_SIZE if dry else speed.StepSize(micro_tokens=4096 if shape.hidden > 1024 else 16384)
        compute = "float32" if dry else "bfloat16"

        def run() -> None:
            if measured["peak"] != measured["peak"]:  # nan: --phases left the peak phase out, and MFU needs it
                peak()
            speed.grpo_step_figures(figs, shape, size, tok, device, measured["peak"], measured["bw"],
                                    targets=targets, compute=compute)
        return run

    small = shapes.TINY_LLAMA if dry else shapes.SMOLLM2_135M
    half = shapes.TINY_QWEN2 if dry else shapes.QWEN2_05B

    def greedy() -> None:
        model = shapes.build_random(small, device, tokenizer=tok)
        prompts = engine_checks.random_token_prompts(4 if dry else 8, len(tok))
        engine_checks.greedy_identity(figs, "engine_random_135m", model, tok, prompts, 8 if dry else 32)

    def kv() -> None:
        model = shapes.build_random(small, device, tokenizer=tok)
        engine_checks.kv_budget(figs, model, tok, device, 4 if dry else 256, 16 if dry else 256, 4 if dry else 64)

    def sharded() -> None:
        size = speed.StepSize(prompts=2, group=2, prompt_len=12, new_tokens=6) if dry else \
            speed.StepSize(prompts=4, group=4, prompt_len=128, new_tokens=64)
        trajs = synthetic_trajectories(size, len(tok))
        fsdp.fsdp_equivalence(figs, small, tok, device, trajs, micro_tokens=size.batch * 256)

    def product_loop() -> None:
        folder = shapes.save_random_folder(small, work / "random-model", args.carry / "tokenizer")
        loop.sync_steps_per_hour(figs, work / "runs", folder, device, dry, steps=2 if dry else 4)

    run_phases(figs, deadline, [
        ("peak_and_bandwidth", 5 if dry else 15, peak),
        ("stash_part1", 2 if dry else 5, stash),
        ("grpo_step_0.5b", 5 if dry else 45, step(half, targets=True)),
        ("engine_greedy_vs_hf", 5 if dry else 25, greedy),
        ("kv_budget", 5 if dry else 15, kv),
        ("fsdp_step", 10 if dry else 30, sharded),
        ("product_loop_sync", 30 if dry else 75, product_loop),
        ("grpo_step_135m", 5 if dry else 30, step(small, targets=False)),
        ("grpo_step_1.5b", 0 if dry else 55, dry_skip if dry else step(shapes.QWEN2_15B, targets=True)),
    ], only, after=lambda: dev.release(device))


def synthetic_trajectories(size: Any, vocab: int) -> list[Any]:
    """GRPO groups of random prompts and random replies (log-probs 0, random rewards): a batch to update on."""
    import random

    from agentrl_core.rollout.generation import Generation
    from bench.gpu.speed import random_prompts, trajectories

    rng = random.Random(7)
    prompts = random_prompts(size, vocab, seed=7)
    gens = [Generation([rng.randrange(3, vocab) for _ in range(size.new_tokens)], [0.0] * size.new_tokens, "length")
            for _ in prompts]
    return trajectories(prompts, gens, size.group, seed=7)


def command_2(figs: Figures, deadline: Deadline, args: argparse.Namespace, work: Path, only: set[str] | None) -> None:
    """The learning run (bench/gpu/learning.py), phase by phase; the env server stopped at the end."""
    from bench.gpu import device as dev
    from bench.gpu.learning import FINAL_EVAL_NEED_S, LearningRun

    device = dev.pick_device(args.dry_run)
    figs.set_device(dev.facts(device))
    dry = args.dry_run
    steps = args.steps if args.steps is not None else (2 if dry else 300)
    run = LearningRun(figs, deadline, args.carry, work, device, dry, steps, args.stash)
    try:
        run_phases(figs, deadline, [
            ("reassemble_model", 2 if dry else 10, run.reassemble),
            ("import_model", 5 if dry else 60, run.convert),
            ("env_server", 10 if dry else 20, run.start_env),
            ("engine_greedy_real_model", 10 if dry else 25, run.greedy_identity),
            ("sft", 20 if dry else 60, run.sft),
            ("eval_sft", 10 if dry else 45, lambda: run.evaluate("sft", "sft")),
            ("gigpo", 20 if dry else 100, run.gigpo),
            ("eval_gigpo", 10 if dry else FINAL_EVAL_NEED_S, lambda: run.evaluate("gigpo", "gigpo")),
            ("compare", 0, run.compare),
        ], only, after=lambda: dev.release(device))
    finally:
        run.close()
