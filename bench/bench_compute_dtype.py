"""Compute dtype: what `model.compute_dtype: auto` picks on this machine, against each explicit setting, side by side.

One run decides auto as a training run would (the capability gate, then the probe; --fresh ignores
the per-machine cache and times the decision), then times training steps of the real model —
forward + backward + AdamW over a batch of B x T tokens, log-softmax over every position as the
trainers do — at float32, at bfloat16 and at auto's pick, each timed as its own setting, alternating,
and prints train tokens/s of each and the ratio of auto to the best explicit setting.

A CPU without bf16 kernels can be emulated on one that has them: oneDNN then runs bf16 without its
AVX-512 kernels, as on an AVX2-only CPU, and torch's own kernels use AVX2:

    .venv/bin/python bench/bench_compute_dtype.py --fresh
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python bench/bench_compute_dtype.py --fresh
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench._common import median, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.models import load_model, resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import choose_compute_dtype, resolve_threads  # noqa: E402
from agentrl_core.models.mixed_precision import autocast  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="alias or HF folder")
    p.add_argument("--batch", type=int, default=4, help="sequences per step")
    p.add_argument("--tokens", type=int, default=256, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=3, help="timed steps per setting (after one warm-up each)")
    p.add_argument("--threads", default="auto", help="torch threads (auto: the CPUs this process may use)")
    p.add_argument("--fresh", action="store_true", help="decide auto now (a temporary cache), not from the cache")
    p.add_argument("--json", default=None, help="write the figures here")
    return p.parse_args()


def train_step(model: torch.nn.Module, optim: torch.optim.Optimizer, ids: torch.Tensor, mode: str) -> float:
    """Seconds of one optimizer step: forward under `mode`, mean token log-prob over all logits, backward, AdamW."""
    start = time.perf_counter()
    with autocast(model, mode):
        logits = model(input_ids=ids).logits
    logp = logits.float().log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None])
    (-logp.mean()).backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    args = parse()
    path = resolve_model(args.model)  # before AGENTRL_HOME moves: an alias lives in the user's cache
    if args.fresh:
        os.environ["AGENTRL_HOME"] = tempfile.mkdtemp(prefix="agentrl-home-")
    torch.set_num_threads(resolve_threads(args.threads if args.threads == "auto" else int(args.threads)))
    start = time.perf_counter()
    choice = choose_compute_dtype(path)
    decided_s = time.perf_counter() - start
    print(choice.message())
    model = load_model(path).train()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-6)
    shape = (args.batch, args.tokens)
    ids = torch.randint(0, model.config.vocab_size, shape, generator=torch.Generator().manual_seed(0))
    # auto is timed as its own setting, as a run with compute_dtype: auto would train, not read off the
    # measurement of the explicit setting it picked
    settings = {"float32": "float32", "bfloat16": "bfloat16", "auto": choice.dtype}
    times: dict[str, list[float]] = {name: [] for name in settings}
    for round_ in range(args.steps + 1):  # round 0 warms up
        for name, mode in settings.items():
            seconds = train_step(model, optim, ids, mode)
            if round_:
                times[name].append(seconds)
    tokens = args.batch * args.tokens
    speed = {name: tokens / median(ts) for name, ts in times.items()}
    figures = {f"train tok/s {name}": s for name, s in speed.items()}
    figures["auto / best explicit"] = speed["auto"] / max(speed["float32"], speed["bfloat16"])
    figures["bfloat16 / float32"] = speed["bfloat16"] / speed["float32"]
    figures["auto decision s"] = decided_s
    print_table(f"compute dtype, {args.model}, {args.batch}x{args.tokens} tokens, {torch.get_num_threads()} threads, "
                f"median of {args.steps}, auto = {choice.dtype} (CPU capability "
                f"{torch.backends.cpu.get_cpu_capability()})", figures)
    save_json(args.json, {"args": vars(args), "figures": figures, "texts": {"auto": choice.dtype},
                          "auto": choice.dtype, "reason": choice.reason})


if __name__ == "__main__":
    run_recorded("compute_dtype", main)
