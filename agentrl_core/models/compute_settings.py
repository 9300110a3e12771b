"""Per-machine compute settings: bf16 autocast or fp32, and CPU threads, chosen for this machine and cached.

`model.compute_dtype: auto` is decided once per machine (CPU model and flags, torch version, model
architecture): first by what the hardware supports — on a CPU, whether oneDNN has bf16 kernels
(avx512 / avx512_bf16 / AMX); without them bf16 autocast runs emulated, measured 8x slower than fp32
here, so it is not even tried — then, where bf16 is possible, by a short measurement of the actual
model: a few forward+backward passes at each candidate. bf16 wins only when it is at least MARGIN
times faster (fp32 is exact; a tie is noise). The choice is cached in `$AGENTRL_HOME/machine/compute.json`
(agentrl_core.system.machine_cache: one process measures, concurrent ones wait and read its answer).
On CUDA, bf16 wherever the GPU supports it. `model.cpu_threads: auto` is the CPUs this process may
use (affinity and cgroup quota), not torch's default of every physical core of the host.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agentrl_core.system.machine_cache import cache_key as machine_key
from agentrl_core.system.machine_cache import cache_path, cached_decision, machine_facts
from agentrl_core.system.machine_info import cpu_info, usable_cores

if TYPE_CHECKING:
    from agentrl_core.config import RecipeConfig

log = logging.getLogger(__name__)

AUTO = "auto"
MARGIN = 1.1
"""bf16 is chosen only when a probe pass is at least this many times faster than fp32."""
PROBE_TOKENS = 64
"""Tokens of the probe batch (1 sequence): enough for the matmuls that dominate training."""
PROBE_PASSES = 2
"""Timed passes per candidate after one warm-up pass each; the fastest counts."""
PROBE_BUDGET_S = 30.0
"""The probe stops here on a very busy machine; an unfinished probe picks fp32 and is not cached."""
Measure = Callable[[Path, "list[str]"], "dict[str, float]"]
_warned: list[bool] = []


@dataclass(frozen=True)
class ComputeChoice:
    """The compute dtype picked for this machine and model, and why."""

    dtype: str
    """"float32" or "bfloat16": what reaches the trainer and the rollout engines."""
    reason: str
    """Why, in words (shown at start)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Fastest probe pass per candidate, when measured."""
    cached: bool = False
    """True when read from the per-machine cache instead of measured now."""

    @property
    def speedup(self) -> float | None:
        """fp32 probe time over bf16 probe time (>1: bf16 is faster), when both were measured."""
        fp32, bf16 = self.seconds.get("float32"), self.seconds.get("bfloat16")
        return fp32 / bf16 if fp32 and bf16 else None

    def message(self) -> str:
        """E.g. "compute dtype bfloat16: 1.9x float32 here (...)"."""
        head = f"compute dtype {self.dtype}"
        if self.speedup is not None:
            ratio = self.speedup if self.dtype == "bfloat16" else 1 / self.speedup
            other = "float32" if self.dtype == "bfloat16" else "bfloat16"
            head += f": {ratio:.1f}x {other} here"
        return f"{head} ({self.reason}{'; cached' if self.cached else ''}; set model.compute_dtype to override)"


def bf16_support(device: str) -> tuple[bool, str]:
    """(bf16 autocast has native kernels on `device`, the reason in words)."""
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported():
            return True, f"the GPU {name} supports bf16"
        return False, f"the GPU {name} has no bf16 support"
    cpu = cpu_info()
    if cpu.onednn_bf16:
        return True, f"oneDNN has bf16 kernels for {cpu.model} ({' '.join(cpu.flags)})"
    return False, (f"oneDNN has no bf16 kernels for {cpu.model} ({' '.join(cpu.flags) or 'no AVX2'}, torch "
                   f"{cpu.torch_capability}): bf16 would run emulated, several times slower than fp32")


def _one_pass(model: object, ids: object, mode: str) -> float:
    """Seconds of one training-shaped pass: forward under `mode`, log-softmax over all logits, backward."""
    from agentrl_core.models.mixed_precision import autocast

    start = time.perf_counter()
    with autocast(model, mode):
        logits = model(input_ids=ids).logits  # type: ignore[operator]
    logits.float().log_softmax(-1).mean().backward()
    model.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
    return time.perf_counter() - start


def measure_passes(model_path: Path, modes: list[str], *, tokens: int = PROBE_TOKENS, passes: int = PROBE_PASSES,
                   budget_s: float = PROBE_BUDGET_S) -> dict[str, float]:
    """Fastest seconds of a forward+backward pass of the model at `model_path` per mode (a mode missing
    from the result did not finish within `budget_s`).

    Candidates alternate pass by pass, so a burst of load elsewhere slows both alike, and the minimum
    is kept (load only ever adds time). The probe runs on one thread: with every core in use, a busy
    neighbour process makes multi-threaded kernels wait on a descheduled thread at every parallel
    region (measured here: 24 s instead of 0.5 s for one pass), which would swamp the comparison;
    the kernels compared are the same at any thread count.
    """
    import torch

    from agentrl_core.models.loading import load_model

    model = load_model(model_path, dtype="float32").train()
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    threads, deadline, best = torch.get_num_threads(), time.monotonic() + budget_s, {}
    torch.set_num_threads(1)
    try:
        for round_ in range(passes + 1):  # round 0 warms up (first-call allocations, kernel selection)
            for mode in modes:
                if time.monotonic() > deadline:
                    return best
                seconds = _one_pass(model, ids, mode)
                if round_:
                    best[mode] = min(best.get(mode, math.inf), seconds)
    finally:
        torch.set_num_threads(threads)
    return best


def decide(seconds: dict[str, float], support: str) -> ComputeChoice:
    """bf16 when its probe pass is at least MARGIN times faster than fp32's, else fp32."""
    fp32, bf16 = seconds.get("float32"), seconds.get("bfloat16")
    if fp32 is None or bf16 is None:
        return ComputeChoice("float32", f"the probe did not finish (within {PROBE_BUDGET_S:g} s); float32 until "
                                        "it does", seconds)
    probe = f"probe pass {bf16:.2f} s bf16 vs {fp32:.2f} s fp32; {support}"
    return ComputeChoice("bfloat16" if fp32 >= MARGIN * bf16 else "float32", probe, seconds)


def _architecture(model_path: Path) -> dict[str, object]:
    """What decides the probe's speed: the model's shape, not its weights (exports of a run share it)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {"path": str(Path(model_path).resolve())}
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size")
    return {k: config.get(k) for k in keys}


CACHE_NAME = "compute"
"""The machine cache (agentrl_core.system.machine_cache) holding the compute-dtype choices."""


def cache_file() -> Path:
    """The per-machine cache of compute choices."""
    return cache_path(CACHE_NAME)


def cache_key(model_path: Path, device: str) -> str:
    """Hash of CPU model and flags, torch version and kernel level, device and model architecture."""
    import torch

    facts = {**machine_facts(cpu_info()), "device": torch.cuda.get_device_name() if device == "cuda" else device,
             "model": _architecture(model_path)}
    return machine_key(facts)


def default_device() -> str:
    """Where training runs: the GPU when CUDA is available, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_compute_dtype(model_path: str | os.PathLike[str], *, device: str | None = None,
                         measure: Measure | None = None) -> ComputeChoice:
    """The compute dtype for this machine and model: from the cache, or decided now (and cached)."""
    device, path = device or default_device(), Path(model_path)
    supported, support = bf16_support(device)
    if not supported:
        return ComputeChoice("float32", f"{support}; not tried")
    if device == "cuda":
        return ComputeChoice("bfloat16", support)
    entry, cached = cached_decision(CACHE_NAME, cache_key(path, device), lambda: _measured(path, support, measure),
                                    valid=lambda e: e.get("dtype") in ("float32", "bfloat16"),
                                    keep=lambda e: len(e["seconds"]) == 2)  # an unfinished probe: measure next time
    return ComputeChoice(entry["dtype"], entry.get("reason", ""), dict(entry.get("seconds", {})), cached=cached)


def _measured(path: Path, support: str, measure: Measure | None) -> dict[str, object]:
    """The cache entry of a probe run now: dtype, reason, seconds per candidate, the CPU line."""
    try:
        seconds = (measure or measure_passes)(path, ["float32", "bfloat16"])
    except Exception as exc:  # noqa: BLE001 - a probe that cannot run must not stop the run: fp32 works everywhere
        log.warning("the compute-dtype probe failed (%s: %s); using float32", type(exc).__name__, exc)
        seconds = {}
    choice = decide(seconds, support)
    return {"dtype": choice.dtype, "reason": choice.reason, "seconds": choice.seconds, "cpu": cpu_info().describe()}


def resolve_threads(setting: int | str) -> int:
    """CPU threads for `model.cpu_threads`: the number given, or (auto) the CPUs this process may use,
    capped by OMP_NUM_THREADS when that is set: auto = min(usable cores, OMP_NUM_THREADS).

    OMP_NUM_THREADS is how a machine shared by several jobs gives each its share of the cores (the test
    suite's parallel workers set 1); an explicit `model.cpu_threads` wins over it."""
    if setting != AUTO:
        return int(setting)
    share = omp_threads()
    return min(usable_cores(), share) if share else usable_cores()


def omp_threads() -> int | None:
    """The thread count OMP_NUM_THREADS asks for (its first, outermost level: "4,2" is 4); None when unset,
    not a positive integer, or malformed."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def resolve_compute_settings(cfg: RecipeConfig, model_path: str | os.PathLike[str], *,
                             report: Callable[[str], None] = log.info) -> RecipeConfig:
    """`cfg` with model.compute_dtype and model.cpu_threads made concrete for this machine, the threads
    applied to this process (torch.set_num_threads), and the choice reported once.

    Call it where a recipe becomes work (the flows, the stage entry points): everything downstream
    receives "float32"/"bfloat16" and a thread count. Explicit values are kept as given.
    """
    import torch

    updates: dict[str, object] = {}
    threads = resolve_threads(cfg.model.cpu_threads)
    if torch.get_num_threads() != threads:
        report(f"CPU threads: {threads} (model.cpu_threads={cfg.model.cpu_threads}; torch chose "
               f"{torch.get_num_threads()})")
        torch.set_num_threads(threads)
    if cfg.model.cpu_threads == AUTO:
        updates["cpu_threads"] = threads
    if cfg.model.compute_dtype == AUTO:
        choice = choose_compute_dtype(model_path)
        updates["compute_dtype"] = choice.dtype
        report(choice.message())
    elif cfg.model.compute_dtype == "bfloat16" and not _warned and not bf16_support(default_device())[0]:
        _warned.append(True)  # once per process: the flow and the stage both resolve
        report(f"warning: model.compute_dtype=bfloat16 is set, but {bf16_support(default_device())[1]}; "
               "model.compute_dtype=auto picks what is fastest here")
    return cfg.model_copy(update={"model": cfg.model.model_copy(update=updates)}) if updates else cfg
