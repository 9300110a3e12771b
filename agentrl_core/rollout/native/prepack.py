"""Whether the native engine prepacks its weights for oneDNN: decided once per machine, cached, overridable.

A prepacked oneDNN matmul (the blocked layout PyTorch's own compiler uses for CPU inference) can
beat `F.linear` several times at decode batch sizes, or not at all, depending on the CPU, the torch
build, the dtype and the matrix shape, so a short timing probe decides. Its float32 results differ
from F.linear's in the last bits, so the verdict must be the same in every process of the machine,
or two runs with the same seed compute differently: it is measured once and kept in
`$AGENTRL_HOME/machine/prepack.json` (agentrl_core.system.machine_cache, as the compute dtype is), keyed by
CPU, torch and the (dtype, shape) of the weights. `$AGENTRL_NATIVE_PREPACK=on|off` overrides it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

import torch
import torch.nn.functional as F

from agentrl_core.errors import ConfigError
from agentrl_core.system.machine_cache import cache_key as machine_key
from agentrl_core.system.machine_cache import cache_path, cached_decision, machine_facts
from agentrl_core.system.machine_info import cpu_info, usable_cores

log = logging.getLogger(__name__)

PACK_BATCH_HINT = 64
"""The batch size oneDNN lays a packed weight out for (decode batches and prefill chunks vary)."""
PACK_MARGIN = 1.15
"""Prepacking is used only when the probe is at least this many times faster than F.linear."""
PREPACK_ENV = "AGENTRL_NATIVE_PREPACK"
"""Overrides the prepacking decision: on, off, or auto (the default)."""
ON, OFF, AUTO = "on", "off", "auto"
CACHE_NAME = "prepack"
"""The machine cache (agentrl_core.system.machine_cache) holding the probe's verdicts."""
_pack_decisions: dict[tuple, bool] = {}


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] in oneDNN's blocked layout for `torch.ops.mkldnn._linear_pointwise`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)


def prepack_setting() -> str:
    """`$AGENTRL_NATIVE_PREPACK`: "on", "off", or "auto" (the default: measured once per machine, cached)."""
    value = os.environ.get(PREPACK_ENV, AUTO).strip().lower() or AUTO
    if value not in (ON, OFF, AUTO):
        raise ConfigError(f"{PREPACK_ENV}={value!r} is not a setting: use on, off or auto (auto: the native engine "
                          f"measures once per machine whether prepacked weights are faster, and caches the answer "
                          f"in {cache_path(CACHE_NAME)})")
    return value


def prepack_pays(dtype: torch.dtype, shape: tuple[int, int], device: torch.device) -> bool:
    """Whether the engine prepacks a [out, in] = `shape` weight in `dtype`: the PREPACK_ENV setting, else the
    machine's cached probe verdict (`decide_prepack`); read once per process and shape family."""
    key = (dtype, shape, device.type)
    if key not in _pack_decisions:
        _pack_decisions[key] = _prepack(dtype, shape, device)
    return _pack_decisions[key]


def _prepack(dtype: torch.dtype, shape: tuple[int, int], device: torch.device) -> bool:
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    setting = prepack_setting()
    if setting == ON and not _packs(dtype, shape):
        raise ConfigError(f"{PREPACK_ENV}=on, but oneDNN cannot prepack {dtype} weights on this machine "
                          f"({cpu_info().describe()}); set {PREPACK_ENV}=auto or off")
    if setting != AUTO:
        log.info("native engine: oneDNN-prepacked weights %s for %s %s (%s=%s)", setting, dtype, shape,
                 PREPACK_ENV, setting)
        return setting == ON
    return decide_prepack(dtype, shape)


def decide_prepack(dtype: torch.dtype, shape: tuple[int, int]) -> bool:
    """The probe's verdict for this machine (CPU, torch) and weight family, from `$AGENTRL_HOME/machine/
    prepack.json`, or measured now and stored there: every later process reads the same answer, so prepacking
    (whose fp32 results differ from F.linear's in the last bits) never differs between two seeded runs."""
    facts = {**machine_facts(), "dtype": str(dtype), "shape": list(shape)}
    entry, cached = cached_decision(CACHE_NAME, machine_key(facts), lambda: _probe(dtype, shape),
                                    valid=lambda e: isinstance(e.get("prepack"), bool))
    log.info("native engine: oneDNN-prepacked weights %s for %s %s (%s%s; %s=on/off to override)",
             "on" if entry["prepack"] else "off", dtype, shape, entry.get("reason", ""), "; cached" if cached else "",
             PREPACK_ENV)
    return bool(entry["prepack"])


def _packs(dtype: torch.dtype, shape: tuple[int, int]) -> bool:
    """Whether oneDNN can prepack and multiply a `dtype` weight here (a bf16 kernel needs avx512/AMX)."""
    try:
        packed = pack_weight(torch.zeros(shape, dtype=dtype))
        torch.ops.mkldnn._linear_pointwise(torch.zeros(1, shape[1], dtype=dtype), packed, None, "none", [], "")
        return True
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def _probe(dtype: torch.dtype, shape: tuple[int, int]) -> dict[str, object]:
    """The cache entry of a measurement now: best of a few calls at batch 16 and 256, after a warm-up.

    At the machine's usable cores (what `model.cpu_threads: auto` runs with), whatever this process uses,
    so the verdict does not depend on which process happened to measure first (measured here, fp32: 1.1x
    on one thread, 1.4x on two). Inputs come from a private generator, so the probe never moves the
    global RNG that the seeded run goes on to use."""
    if not _packs(dtype, shape):
        return {"prepack": False, "reason": f"oneDNN cannot prepack {dtype} here"}
    gen = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(usable_cores())
    try:
        w = torch.randn(shape, dtype=torch.float32, generator=gen).to(dtype)
        packed = pack_weight(w)
        plain = packed_time = 0.0
        for rows in (16, 256):
            x = torch.randn(rows, shape[1], generator=gen).to(dtype)
            plain += _best_of(lambda: F.linear(x, w))
            packed_time += _best_of(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
    finally:
        torch.set_num_threads(threads)
    return {"prepack": plain >= PACK_MARGIN * packed_time, "seconds": {"plain": plain, "packed": packed_time},
            "reason": f"probe {plain / packed_time:.2f}x F.linear on {usable_cores()} threads, prepacked when "
                      f">= {PACK_MARGIN}x"}


def _best_of(fn: Callable[[], object], reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
