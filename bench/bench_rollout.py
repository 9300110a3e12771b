"""Rollout speed: the native engine against the HF engine on the same episodes, and against this CPU's ceilings.

One run plays the household demo's episodes (recipes/household_grpo.yaml: 4 tasks x 4 samples,
up to 8 turns of 12 new tokens, temperature 1.0) with both engines, alternating, on the same
tasks and seeds, and prints generated tokens/s of each and their ratio. Beside them:
- the decode ceiling: plain batched decode with a kept KV cache (HF forward + DynamicCache, no
  generate(), no prefill counted) at the rollout's batch size and a typical context length;
- the matmul peak of this CPU in float32 and bfloat16 (square GEMMs), and the native rollout's
  model FLOP/s (2 · params · generated tok/s) as a fraction of it.

    .venv/bin/python bench/bench_rollout.py [--compute-dtype bfloat16] [--model PATH] [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench._common import load_baseline, median, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.config import EngineConfig, SamplingConfig  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.envs import make  # noqa: E402
from agentrl_core.models import load_model, load_tokenizer, mixed_precision, resolve_model  # noqa: E402
from agentrl_core.models.chat import ChatFormat  # noqa: E402
from agentrl_core.models.compute_settings import choose_compute_dtype  # noqa: E402
from agentrl_core.rollout import EpisodeSpec, LoopLimits, run_episodes  # noqa: E402
from agentrl_core.rollout.engine_factory import make_engine  # noqa: E402

HOUSEHOLD = {"max_steps": 8, "two_room_prob": 0.0, "max_receptacles": 4, "max_objects": 3}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="alias or HF folder (e.g. the demo's SFT export)")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--compute-dtype", dest="autocast", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto: what model.compute_dtype: auto picks on this machine (as `agentrl run` does)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="rollouts per engine (alternating), median reported")
    p.add_argument("--engines", default="hf,native")
    p.add_argument("--context", type=int, default=400, help="context length of the decode-ceiling measurement")
    p.add_argument("--json")
    p.add_argument("--baseline")
    return p.parse_args()


def rollout(engine, chat, args, seed: int) -> dict[str, float]:
    specs = [EpisodeSpec(task_id=t, group=t, sample=s) for t in range(args.tasks) for s in range(args.samples)]
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.new_tokens)
    start = time.perf_counter()
    trajs = run_episodes(engine, chat, lambda: make("household", **HOUSEHOLD), specs, sampling,
                         LoopLimits(args.max_turns, 1024), seed=seed)
    wall = time.perf_counter() - start
    generated = sum(t.response_tokens for t in trajs)
    return {"wall_s": wall, "generated_tokens": float(generated), "tok_per_s": generated / wall,
            "turns": float(sum(t.num_turns for t in trajs)),
            "context_tokens": float(sum(len(t.token_ids) for t in trajs))}


@torch.no_grad()
def decode_ceiling(model, batch: int, context: int, steps: int, autocast: str) -> float:
    """Generated tok/s of plain batched decode with a kept KV cache (prefill excluded)."""
    from transformers import DynamicCache

    ids = torch.randint(100, 1000, (batch, context))
    cache = DynamicCache(config=model.config)
    with mixed_precision.autocast(model, autocast):
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        start = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, cache=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return batch * steps / (time.perf_counter() - start)


def matmul_peak(dtype: torch.dtype, n: int = 1024, reps: int = 8) -> float:
    """FLOP/s of an n x n x n matmul in `dtype`, best of `reps`."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    if args.autocast == "auto":
        args.autocast = choose_compute_dtype(path).dtype
    model, tok = load_model(path), load_tokenizer(path)
    chat = ChatFormat(tok)
    kinds = args.engines.split(",")
    engines = {k: make_engine(EngineConfig(kind=k), model, tok, autocast=args.autocast) for k in kinds}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for r in range(args.repeats):
        for k in kinds:
            runs[k].append(rollout(engines[k], chat, args, seed=r))
    figures: dict[str, float] = {}
    for k in kinds:
        for key in ("tok_per_s", "wall_s", "generated_tokens", "turns"):
            figures[f"{k}/{key}"] = median([x[key] for x in runs[k]])
    if "hf" in kinds and "native" in kinds:
        figures["native_vs_hf_tok_per_s"] = figures["native/tok_per_s"] / figures["hf/tok_per_s"]
    batch = args.tasks * args.samples
    figures["ceiling_decode_tok_per_s"] = decode_ceiling(model, batch, args.context, 24, args.autocast)
    if "native" in kinds:
        figures["native_vs_ceiling"] = figures["native/tok_per_s"] / figures["ceiling_decode_tok_per_s"]
        n_params = sum(p.numel() for p in model.parameters())
        flops = 2 * n_params * figures["native/tok_per_s"]
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            peak = matmul_peak(dtype)
            figures[f"matmul_peak_{name}_gflops"] = peak / 1e9
            figures[f"native_flops_vs_{name}_peak"] = flops / peak
    print(describe_cpu())
    print_table(f"rollout, household demo episodes ({args.tasks}x{args.samples}, <= {args.max_turns} turns x "
                f"{args.new_tokens} tokens, T={args.temperature}), compute_dtype={args.autocast}, "
                f"median of {args.repeats}", figures, load_baseline(args.baseline))
    save_json(args.json, {"args": vars(args), "figures": figures, "runs": runs, "cpu": describe_cpu(),
                          "texts": {"compute_dtype": args.autocast}})


if __name__ == "__main__":
    run_recorded("rollout", main)
