"""Shared helpers of the benchmark scripts: peak memory, tables, JSON results and baselines, the CPU they ran on."""

from __future__ import annotations

import json
import resource
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentrl_core.system.machine_info import cpu_info, describe_cpu, peak_resident_bytes
from bench.recording import current


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far: VmHWM, the high-water mark of this process's own memory
    (getrusage's ru_maxrss is not: it keeps the parent's resident size at fork across exec, so a child of a
    large benchmark process would report its parent's size); ru_maxrss where /proc is missing."""
    hwm = peak_resident_bytes()
    return hwm / 2**30 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def print_table(title: str, figures: dict[str, float], baseline: dict[str, float] | None = None) -> None:
    """Figures as a table captioned with the CPU they were measured on; with a baseline (an earlier JSON
    output), a ratio column too."""
    cols = ["figure", "value"] + (["baseline", "ratio"] if baseline else [])
    table = Table(*cols, title=title, caption=describe_cpu())
    for key, value in figures.items():
        row = [key, f"{value:.4g}"]
        if baseline:
            base = baseline.get(key)
            row += [f"{base:.4g}" if base is not None else "-",
                    f"{value / base:.2f}x" if base not in (None, 0) else "-"]
        table.add_row(*row)
    Console(width=max(Console().width, 160)).print(table)  # teed to a pipe: no 80-column wrap


def save_json(path: str | None, payload: dict[str, Any]) -> None:
    """Report the payload's "figures" (and the rest) to this run's results file (`bench/recording.py`), and
    write the payload to `path` too, with the CPU it was measured on (model, flags, cores) under "machine"."""
    recording = current()
    if recording is not None:
        recording.report(payload.get("figures", {}), **{k: v for k, v in payload.items() if k != "figures"})
    if path:
        Path(path).write_text(json.dumps({**payload, "machine": cpu_info().to_dict()}, indent=2))


def load_baseline(path: str | None) -> dict[str, float] | None:
    return json.loads(Path(path).read_text())["figures"] if path else None
