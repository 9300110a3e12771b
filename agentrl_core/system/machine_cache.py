"""Per-machine decisions (compute dtype, weight prepacking): measured once, cached under `$AGENTRL_HOME/machine/`.

A decision that a timing probe makes must not be made again in every process: a second process
on a busier moment could decide otherwise, and two runs with the same seed would then compute
differently. Each decision lives in one JSON file (`<name>.json`), one entry per key; the key hashes
the facts the decision depends on (CPU model and flags, torch version and kernel level, plus the
caller's own: model architecture, dtype, shape). Deciding holds an advisory lock on `<name>.json.lock`,
so two processes starting at once measure once and read the same answer; the file is replaced
atomically (a temporary file renamed), so a reader never sees half of it. Deleting a file makes the
next process measure again (e.g. after moving the home to another machine type: the key changes anyway).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from agentrl_core.system.atomic_file import write_text_atomic
from agentrl_core.errors import DiskFullError
from agentrl_core.system.machine_info import CpuInfo, cpu_info
from agentrl_core.system.home import agentrl_home

log = logging.getLogger(__name__)

LOCK_WAIT_S = 120.0
"""How long a process waits for another one's measurement before measuring itself (a probe is bounded
well below this; the wait only ends early if the holder is stopped, e.g. suspended in a debugger)."""


def machine_facts(cpu: CpuInfo | None = None) -> dict[str, object]:
    """What makes a measurement on this machine valid elsewhere: the CPU (model, generation where known, speed
    flags, torch's kernel level, oneDNN bf16) and the torch version."""
    import torch

    cpu = cpu or cpu_info()
    facts: dict[str, object] = {"cpu": [cpu.model, list(cpu.flags), cpu.torch_capability, cpu.onednn_bf16],
                                "torch": torch.__version__}
    if generation := getattr(cpu, "generation", None):  # virtual machines often name only "AMD EPYC"
        facts["cpu_generation"] = generation
    return facts


def cache_key(facts: dict[str, object]) -> str:
    """A short stable hash of `facts` (JSON with sorted keys)."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cache_path(name: str) -> Path:
    """The file holding the decisions called `name` (e.g. "compute", "prepack")."""
    return agentrl_home() / "machine" / f"{name}.json"


def read_entries(path: Path) -> dict[str, dict]:
    """Every entry of a cache file; {} when it is missing or unreadable (then it is measured again)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_entry(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Add one entry (stamped with the time, and the CPU line unless it has one); written to a temporary
    name and renamed."""
    data = read_entries(path)
    data[key] = {"cpu": cpu_info().describe(), **entry, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_text_atomic(path, json.dumps(data, indent=1))  # a full disk leaves no half-written file behind


@contextmanager
def _locked(path: Path, wait_s: float) -> Iterator[bool]:
    """Hold an exclusive flock beside `path` (True), or go on without it after `wait_s` (False): a measurement
    taken twice is only wasted time, and the atomic rename still keeps the file whole."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")
    except OSError as err:  # a read-only or full home: decide anyway, for this process
        log.warning("cannot lock %s (%s: %s); deciding without the lock", path, type(err).__name__, err)
        yield False
        return
    with handle:
        deadline = time.monotonic() + wait_s
        while True:  # polled, not blocking: a stopped holder must not hang this process forever
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log.warning("%s stayed locked for %.0f s; measuring without waiting longer", path, wait_s)
                    yield False
                    return
                time.sleep(0.05)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_decision(name: str, key: str, measure: Callable[[], dict[str, Any]], *,
                    valid: Callable[[dict], bool] = lambda entry: True,
                    keep: Callable[[dict], bool] = lambda entry: True,
                    wait_s: float = LOCK_WAIT_S) -> tuple[dict[str, Any], bool]:
    """(entry, cached): the valid entry `key` of cache `name`, else what `measure()` returns now, stored when
    `keep(entry)` (an unfinished measurement is not: the next process measures again). While one process
    measures, the others wait for its entry instead of measuring alongside (and disturbing its timing)."""
    path = cache_path(name)
    if (hit := read_entries(path).get(key)) and valid(hit):
        return hit, True
    with _locked(path, wait_s):
        if (hit := read_entries(path).get(key)) and valid(hit):  # measured by another process meanwhile
            return hit, True
        entry = measure()
        if keep(entry):
            try:
                write_entry(path, key, entry)
            except (OSError, DiskFullError) as err:  # the run goes on; the next process measures again
                log.warning("could not keep the %s decision in %s (%s: %s); the next process measures again",
                            name, path, type(err).__name__, err)
    return entry, False
