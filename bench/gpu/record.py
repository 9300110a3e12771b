"""The figures file and the time guard: every figure is printed and written the moment it is measured.

A device command can be stopped at its limit at any second, and only files under $OUT come back. So the
figures file (one JSON object) is rewritten atomically after every figure and every phase, and each
phase first checks the command's deadline: a phase that would not fit is recorded as skipped (with the
seconds it needed and the seconds left) instead of being started and killed half way.
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda value, limit: value >= limit,
    "<=": lambda value, limit: value <= limit,
    "==": lambda value, limit: value == limit,
}


class PhaseSkipped(RuntimeError):
    """Raised by a phase that cannot run (its input was not produced): recorded as skipped, with the reason."""


@dataclass
class Deadline:
    """Seconds left of a command's budget, counted from its creation on `clock`."""

    budget_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return self.budget_s - self.elapsed()


class Figures:
    """The figures of one command in `path` (JSON): meta, the device, each figure with its target and
    verdict, and each phase's status (done, skipped, error) with its seconds."""

    def __init__(self, path: Path, meta: dict[str, Any], log: Callable[[str], None] = print) -> None:
        self.path, self.log = Path(path), log
        self.data: dict[str, Any] = {"meta": meta, "device": {}, "figures": {}, "phases": {}, "notes": []}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.save()

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it): a kill never leaves half a file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=_plain) + "\n")
        os.replace(tmp, self.path)

    def set_device(self, facts: dict[str, Any]) -> None:
        self.data["device"] = facts
        self.log("DEVICE " + json.dumps(facts, default=_plain))
        self.save()

    def add(self, name: str, value: Any, *, unit: str = "", target: tuple[str, float] | None = None,
            note: str = "") -> None:
        """Record one figure; with a target (op, limit), its verdict `ok` = value op limit."""
        entry: dict[str, Any] = {"value": value, "unit": unit}
        if target is not None:
            op, limit = target
            entry["target"] = f"{op} {limit:g}"
            entry["ok"] = _finite(value) and TARGET_OPS[op](float(value), float(limit))
        if note:
            entry["note"] = note
        self.data["figures"][name] = entry
        verdict = "" if target is None else f"  (target {entry['target']}: {'PASS' if entry['ok'] else 'FAIL'})"
        self.log(f"FIGURE {name} = {_show(value)} {unit}{verdict}{'  # ' + note if note else ''}")
        self.save()

    def note(self, text: str) -> None:
        """A sentence for the reader (what was not measured and why)."""
        self.data["notes"].append(text)
        self.log(f"NOTE {text}")
        self.save()

    def phase(self, name: str, status: str, seconds: float, detail: str = "") -> None:
        entry = {"status": status, "seconds": round(seconds, 2)}
        self.data["phases"][name] = {**entry, "detail": detail} if detail else entry
        self.log(f"PHASE {name}: {status} ({seconds:.1f} s){' - ' + detail if detail else ''}")
        self.save()


def run_phase(figs: Figures, deadline: Deadline, name: str, need_s: float, fn: Callable[[], Any]) -> Any:
    """Run `fn` when at least `need_s` seconds are left, else record it as skipped (so too when it raises
    PhaseSkipped); any other exception is recorded (type, message, the end of its traceback) and the command
    goes on with its next phase."""
    left = deadline.left()
    if left < need_s:
        figs.phase(name, "skipped", 0.0, f"needs ~{need_s:.0f} s, {max(0.0, left):.0f} s left")
        return None
    figs.log(f"--- {name} (needs ~{need_s:.0f} s, {left:.0f} s left)")
    start = time.monotonic()
    try:
        out = fn()
    except PhaseSkipped as why:
        figs.phase(name, "skipped", time.monotonic() - start, str(why))
        return None
    except Exception as exc:  # noqa: BLE001 - one broken phase must not cost the figures of the others
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        figs.log(traceback.format_exc())
        figs.phase(name, "error", time.monotonic() - start, f"{type(exc).__name__}: {exc}"[:400] + f" | {tail[-600:]}")
        return None
    figs.phase(name, "done", time.monotonic() - start)
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself (paths, tuples of numbers, numpy scalars)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def keep_results(figures_file: Path, log_file: Path, record: str, device_command: str, revision: str,
                 results_dir: Path) -> Path:
    """A device run's figures file and log as a results file of `bench/recording.py`'s kind:
    `<record>.json` (bench, record, command, device, git_revision, date, figures: the numbers, texts: the
    rest, targets, phases, notes) and `<record>.txt` (the log, headed by the command). `revision` is the
    commit whose tree the device ran (the device copies the working tree: commit before the run)."""
    import datetime as dt

    data = json.loads(Path(figures_file).read_text())
    numbers = {k: float(e["value"]) for k, e in data["figures"].items()
               if isinstance(e["value"], (int, float)) and not isinstance(e["value"], bool)}
    texts = {k: str(e["value"]) for k, e in data["figures"].items() if k not in numbers}
    targets = {k: {"target": e["target"], "ok": e["ok"]} for k, e in data["figures"].items() if "target" in e}
    texts |= {f"target/{k}": f"{t['target']}: {'met' if t['ok'] else 'missed'}" for k, t in targets.items()}
    notes = {k: e["note"] for k, e in data["figures"].items() if e.get("note")}
    device = data["device"]
    short = "python3 bench/gpu_checks.py " + " ".join(data["meta"].get("argv", [])).replace(" --out /root/out", "")
    payload = {"bench": "gpu_checks", "record": record, "command": device_command, "recorded_command": short,
               "cpu": f"GPU: {device.get('name')} (capability {device.get('capability')}, "
                      f"{device.get('memory_gib')} GiB), torch {device.get('torch')}",
               "device": device, "git_revision": revision, "git_dirty": False,
               "date": dt.datetime.fromtimestamp(Path(figures_file).stat().st_mtime, dt.timezone.utc)
               .isoformat(timespec="seconds"),
               "figures": numbers, "texts": texts, "targets": targets, "figure_notes": notes,
               "phases": data["phases"], "notes": data["notes"], "meta": data["meta"]}
    stem = Path(results_dir) / record
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    stem.with_suffix(".txt").write_text(f"$ {device_command}\n" + Path(log_file).read_text())
    return stem.with_suffix(".json")
