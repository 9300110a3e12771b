"""Memory of one update row: how the process's peak grows with the row's length, against the memory plan.

Each (length, checkpointing, compute dtype) runs in a fresh process: load the model, run one short
row forward and backward (warm-up), then reset the peak (Linux: /proc/self/clear_refs) and run one
row of `length` tokens through `token_logprobs` and backward as the update does (a quarter of its
positions scored). It prints the growth of the peak resident memory, and the growth the memory plan
(`agentrl_core/training/memory_plan.py`) predicts for that row (a·T_row plus the update's fixed part),
so the plan's constants K, Q0, Q1 and F32 can be checked on any model and machine.

    .venv/bin/python bench/bench_update_memory.py [--model smollm2-135m-instruct] [--lengths 1024 2048 4096]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402

MIB = 2**20


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"])
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # internal: LENGTH DTYPE CHECKPOINTING
    return p.parse_args(argv)


def _peak() -> int:
    from agentrl_core.training.memory_plan import peak_resident_bytes

    return peak_resident_bytes()


def one_row(model, length: int, dtype: str) -> None:
    """Forward and backward of one row, as policy_update runs a micro-batch."""
    import torch

    from agentrl_core.training.logprobs import token_logprobs

    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(length))
    target = torch.zeros(1, length - 1)
    target[:, ::4] = 1
    stats = token_logprobs(model, ids, torch.ones_like(ids), target, with_entropy=True, autocast=dtype)
    stats.logprobs.sum().backward()
    for p in model.parameters():
        p.grad = None


def run_child(model_name: str, length: int, dtype: str, checkpointing: bool) -> None:
    from agentrl_core.models import load_model, resolve_model

    model = load_model(resolve_model(model_name))
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    one_row(model, 64, dtype)
    Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from what is resident now
    start = _peak()
    one_row(model, length, dtype)
    print("CHILD " + json.dumps({"growth_mib": (_peak() - start) / MIB}), flush=True)


def predicted_mib(model_name: str, length: int, dtype: str, checkpointing: bool) -> float:
    """What the memory plan counts for one row: gradients, bf16 weight copies, logits and a·T_row."""
    from agentrl_core.models import resolve_model
    from agentrl_core.training.memory_plan import CHUNK, ModelShape, activation_bytes

    shape = ModelShape.of(resolve_model(model_name))
    bf16 = dtype == "bfloat16"
    fixed = 4 * shape.trainable + (2 * shape.params if bf16 else 0) + 3 * min(CHUNK, length) * shape.vocab * 4
    return (fixed + activation_bytes(shape, checkpointing, length, bf16) * length) / MIB


def measure(args: argparse.Namespace, length: int, dtype: str, checkpointing: bool) -> float:
    out = subprocess.run([sys.executable, __file__, "--model", args.model, "--child", str(length), dtype,
                          str(int(checkpointing))], capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("CHILD "))[6:])["growth_mib"]


def main() -> None:
    args = parse()
    if args.child:
        run_child(args.model, int(args.child[0]), args.child[1], args.child[2] == "1")
        return
    from rich.console import Console
    from rich.table import Table

    from agentrl_core.system.machine_info import describe_cpu

    table = Table("dtype", "checkpointing", "row tokens", "measured MiB", "plan MiB", "plan / measured",
                  title=f"peak memory growth of one update row, {args.model}", caption=describe_cpu())
    figures: dict[str, float] = {}
    for dtype in args.dtypes:
        for checkpointing in (False, True):
            for length in args.lengths:
                got, plan = measure(args, length, dtype, checkpointing), predicted_mib(args.model, length, dtype,
                                                                                        checkpointing)
                key = f"{dtype}/{'ckpt' if checkpointing else 'plain'}/{length}"
                figures |= {f"{key}/measured_mib": got, f"{key}/plan_mib": plan}
                table.add_row(dtype, str(checkpointing), str(length), f"{got:.0f}", f"{plan:.0f}", f"{plan / got:.2f}")
    Console(width=max(Console().width, 140)).print(table)
    save_json(None, {"figures": figures, "model": args.model})


if __name__ == "__main__":
    if "--child" in sys.argv:
        main()
    else:
        run_recorded("update_memory", main)
