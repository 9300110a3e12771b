"""The card under test: its facts, its bf16 matmul peak and its memory bandwidth, measured in the same run.

Figures are judged against what this card does, not its datasheet:

    peak  = max over 3 rounds of 2·n³·iters / t   (n×n @ n×n in the compute dtype, CUDA-event timed)
    BW    = max over 3 rounds of 2·bytes·iters / t (a device-to-device copy reads and writes `bytes`)

On the CPU (--dry-run) the same code runs with small sizes: the numbers then only prove the code path.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import Any

import torch


def pick_device(dry_run: bool) -> torch.device:
    """cuda, or the CPU for --dry-run; without --dry-run a missing GPU is an error, not a silent CPU run."""
    if dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("gpu_checks measures a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
                         "use --dry-run to run the same code on the CPU")
    return torch.device("cuda")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """(fn(), wall seconds) with the device drained before and after."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def facts(device: torch.device) -> dict[str, Any]:
    """The GPU's name, compute capability and memory (or the CPU's description), and the software."""
    import transformers

    out: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "python": platform.python_version()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
        out.update(name=torch.cuda.get_device_name(device), capability=capability,
                   memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                   cuda=torch.version.cuda)
    else:
        from agentrl_core.system.machine_info import describe_cpu

        out.update(name="cpu (dry run)", cpu=describe_cpu())
    return out


def _best_rate(device: torch.device, work: float, body: Callable[[], None], iters: int) -> float:
    """max over 3 rounds of work·iters / seconds of `iters` calls of `body` (after 2 warm-up calls)."""
    for _ in range(2):
        body()
    best = 0.0
    for _ in range(3):
        _, seconds = timed(lambda: [body() for _ in range(iters)], device)
        best = max(best, work * iters / seconds)
    return best


def matmul_peak_tflops(device: torch.device, n: int, dtype: torch.dtype, iters: int = 20) -> float:
    """The measured matmul peak in TFLOP/s: 2·n³ FLOP per n×n @ n×n product."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return _best_rate(device, 2.0 * n**3, lambda: torch.matmul(a, b, out=out), iters) / 1e12


def copy_bandwidth_gbs(device: torch.device, nbytes: int, iters: int = 20) -> float:
    """The measured memory bandwidth in GB/s: a copy of `nbytes` reads and writes them (2·nbytes)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return _best_rate(device, 2.0 * nbytes, lambda: dst.copy_(src), iters) / 1e9


def free_memory_bytes(device: torch.device) -> int:
    """Free GPU memory now (cudaMemGetInfo); on the CPU, what the kernel reports as available."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    from agentrl_core.system.machine_info import available_bytes

    return int(available_bytes() or 0)


def release(device: torch.device) -> None:
    """Hand cached blocks back between phases, so one phase's leftovers do not shrink the next one's room."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
