"""The machine a figure was measured on: CPU model, the instruction sets that decide speed, usable cores."""

from __future__ import annotations

import math
import os
import platform
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The /proc/cpuinfo flags that change which kernels torch and oneDNN run (bf16 needs avx512_bf16 or AMX)."""


@dataclass(frozen=True)
class CpuInfo:
    """What a benchmark or a cached measurement must name to be read against its machine."""

    model: str
    """The CPU's model name (e.g. "AMD EPYC 9B45"; virtual machines often report less)."""
    flags: tuple[str, ...]
    """Which of SPEED_FLAGS the CPU has."""
    cores: int
    """Logical CPUs online."""
    usable_cores: int
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (containers)."""
    torch_capability: str | None
    """torch's ATen kernel level (AVX2, AVX512, ...); None when torch is not asked."""
    onednn_bf16: bool | None
    """Whether oneDNN has bf16 kernels for this CPU (torch.ops.mkldnn._is_mkldnn_bf16_supported)."""
    generation: str | None = None
    """x86 "family F model M" from /proc/cpuinfo: tells CPU generations apart where virtual machines report
    only "AMD EPYC" (family 25 is Zen 3/4, family 26 Zen 5)."""

    def describe(self) -> str:
        """One line, e.g. "AMD EPYC, 2 cores (2 usable), avx2 avx512f avx512_bf16, torch AVX512, oneDNN bf16 yes"."""
        flags = " ".join(self.flags) or "none of " + "/".join(SPEED_FLAGS)
        model = f"{self.model} ({self.generation})" if self.generation else self.model
        parts = [model, f"{self.cores} cores ({self.usable_cores} usable)", flags]
        if self.torch_capability is not None:
            parts.append(f"torch {self.torch_capability}")
        if self.onednn_bf16 is not None:
            parts.append(f"oneDNN bf16 {'yes' if self.onednn_bf16 else 'no'}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _cpuinfo_fields(text: str) -> tuple[str, set[str], str | None]:
    """(model name, flags, "family F model M" or None) of the first processor block of a /proc/cpuinfo text."""
    model, flags, numbers = "", set(), {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key in ("cpu family", "model") and key not in numbers and value.strip().isdigit():
            numbers[key] = value.strip()
    generation = f"family {numbers['cpu family']} model {numbers['model']}" if len(numbers) == 2 else None
    return model, flags, generation


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """CPUs allowed by a cgroup v2 quota (`cpu.max` "QUOTA PERIOD", rounded up); None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def usable_cores() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota.

    torch's default thread count is the machine's physical cores, which in a container limited to a
    few CPUs oversubscribes them (every parallel region then waits for descheduled threads).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return min(cores, limit) if limit else cores


def _torch_cpu_facts() -> tuple[str | None, bool | None]:
    try:
        import torch
    except ImportError:
        return None, None
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        bf16 = False
    return capability, bf16


def cpu_info(*, with_torch: bool = True, cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """This machine's CpuInfo (torch's view included unless `with_torch` is False)."""
    try:
        model, flags, generation = _cpuinfo_fields(cpuinfo.read_text(errors="replace"))
    except OSError:
        model, flags, generation = "", set(), None
    capability, bf16 = _torch_cpu_facts() if with_torch else (None, None)
    return CpuInfo(model=model or platform.processor() or platform.machine() or "unknown CPU",
                   flags=tuple(f for f in SPEED_FLAGS if f in flags), cores=os.cpu_count() or 1,
                   usable_cores=usable_cores(), torch_capability=capability, onednn_bf16=bf16,
                   generation=generation)


def describe_cpu(with_torch: bool = True) -> str:
    """One line naming this machine's CPU, for benchmark output, CI logs and cached measurements."""
    return "CPU: " + cpu_info(with_torch=with_torch).describe()




# -- memory of this process and of the machine ----------------------------------------------------
def resident_bytes() -> int:
    """This process's resident memory now (VmRSS; 0 where /proc is missing)."""
    return _status_field("VmRSS")


def peak_resident_bytes() -> int:
    """This process's peak resident memory so far (VmHWM; 0 where /proc is missing)."""
    return _status_field("VmHWM")


def reset_peak_resident() -> bool:
    """Restart this process's peak resident memory from what is resident now (Linux: "5" to
    /proc/self/clear_refs resets VmHWM), so a stage's peak is its own, not an earlier stage's in the same
    process. False where the kernel does not allow it (the peak then counts from the process's start)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _status_field(name: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def available_bytes(meminfo: str = "/proc/meminfo", cgroup: str | None = "/sys/fs/cgroup") -> int | None:
    """What this process could still take: MemAvailable, capped by a cgroup v2 limit less its usage
    (cgroup None: MemAvailable alone); None where meminfo cannot be read."""
    try:
        with open(meminfo) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    if cgroup is None:
        return available
    try:
        limit = Path(cgroup, "memory.max").read_text().strip()
        if limit != "max":
            available = min(available, int(limit) - int(Path(cgroup, "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return available


# -- disk ----------------------------------------------------------------------------------------
def describe_disk(path: str | Path | None = None) -> str:
    """One line: free and total space where `path` (default: the temporary folder) lives (what an unprivileged
    writer may use, as system.diskfull.free_bytes counts it)."""
    where = Path(path or tempfile.gettempdir())
    usage = shutil.disk_usage(where)
    return f"disk: {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f} GiB at {where}"


if __name__ == "__main__":  # `python -m agentrl_core.system.machine_info`: what CI prints before the tests
    print(describe_cpu())
    print(describe_disk())
