"""Where a command's CPU time goes, by kind of process: a /proc sampler for the test-suite benchmark.

The suite starts hundreds of processes (`agentrl run`, Prefect servers, env servers and their workers, Ray
actors, JVMs, compilers); pytest's durations say how long each test waited, not which processes burned the
CPU. `ProcessSampler` reads every process's /proc/<pid>/stat (utime + stime) every `period_s` while the
command runs and keeps each process's last reading; processes started before the sampler are left out, so
on a quiet machine what is counted is the command's. Each process is then put in a KIND by its command
line (read at its first few samples: a child caught between fork and exec shows its parent's).

Two limits, both in the figures' favour of looking smaller, never larger: a process that lives less than one
period may be missed, and a process's last `period_s` before it exits is not seen.

    CPU seconds of a process = (utime + stime) / SC_CLK_TCK        (proc(5), fields 14 and 15 of stat)
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KINDS: tuple[tuple[str, str], ...] = (
    ("pytest and its workers (the in-process tests)",
     r"-m pytest|bin/pytest|-c import sys;exec\(eval\(sys\.stdin"),  # the last: how pytest-xdist starts a worker
    ("Prefect temporary server of agentrl run", r"agentrl\.prefect_server"),
    ("Prefect flow-run processes",  # a process worker starts `-m prefect.runner._workspace_supervisor`, which
     r"prefect\.engine|prefect\.flow_engine|prefect[./]runner[./]_workspace"),  # runs its bootstrap's engine
    ("Prefect servers, workers and CLI", r"bin/prefect|uvicorn"),
    ("agentrl CLI (run, eval, ...)", r"bin/agentrl|agentrl\.cli"),
    ("env servers", r"env_service\.server"),
    ("env workers", r"env_service\.worker"),
    ("Ray actors and workers", r"ray::|default_worker\.py"),
    ("Ray daemons", r"gcs_server|raylet|ray/_private|ray/dashboard|ray/autoscaler|bin/ray "),
    ("experience pool and model servers", r"experience\.service|serving\.openai_server"),
    ("JVMs (ScienceWorld)", r"java"),
    ("C/C++ compilers", r"cc1|cc1plus|\bc\+\+|\bg\+\+|\bgcc|\bld\b|\bas\b|ninja|collect2"),
    ("PostgreSQL", r"postgres|initdb|pg_ctl"),
    ("browsers (UI tests)", r"chrom"),
    ("other Python processes", r"python"),
)
"""(kind, pattern searched in the first words of the command line), first match wins."""
OTHER = "other processes"
SIGHTINGS = 3
"""A process's kind is read from its command line at each of its first SIGHTINGS samples, then kept."""


def kind_of(command: str) -> str:
    """The KIND of a process from its command line (arguments past the fifth word are not looked at:
    a temporary path naming a test must not make an env worker look like pytest)."""
    head = " ".join(command.split()[:5])
    for name, pattern in KINDS:
        if re.search(pattern, head):
            return name
    return OTHER


def _read_stat(pid: str) -> tuple[str, int, float] | None:
    """(comm, start time in ticks since boot, CPU ticks used) of a live process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return comm, int(rest[19]), float(rest[11]) + float(rest[12])  # fields 22, 14, 15 of proc(5)


def _command(pid: str, comm: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        raw = b""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or comm


@dataclass
class ProcessSampler:
    """Samples /proc in a thread between start() and stop(); figures() sums the CPU by kind."""

    period_s: float = 0.5
    seen: dict[tuple[int, int], list] = field(default_factory=dict)  # (pid, start) -> [kind, ticks, sightings]
    _floor: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    own_cpu_s: float = 0.0

    def start(self) -> None:
        """Begin sampling; processes already running (this one included) are not counted."""
        self._floor = max((s[1] for p in _pids() if (s := _read_stat(p))), default=0)
        self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        begin = time.thread_time()
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)
        self.sample()
        self.own_cpu_s = time.thread_time() - begin

    def sample(self) -> None:
        """Read every process once: new ones get their kind, known ones their CPU so far."""
        for pid in _pids():
            stat = _read_stat(pid)
            if stat is None or stat[1] <= self._floor:
                continue
            key = (int(pid), stat[1])
            entry = self.seen.setdefault(key, [OTHER, 0.0, 0])
            if entry[2] < SIGHTINGS:  # a child seen between fork and exec still shows its parent's command
                entry[0] = kind_of(_command(pid, stat[0]))
            entry[1], entry[2] = stat[2], entry[2] + 1

    def figures(self) -> dict[str, float]:
        """cpu_s/<kind> and processes/<kind> for every kind seen, the total, and the sampler's own CPU."""
        tick = float(os.sysconf("SC_CLK_TCK"))
        cpu, count = Counter(), Counter()
        for kind, ticks, _ in self.seen.values():
            cpu[kind] += ticks / tick
            count[kind] += 1
        figures = {"process_cpu_s_total": sum(cpu.values()), "processes_total": float(sum(count.values())),
                   "process_sampler_own_cpu_s": self.own_cpu_s}
        for kind, seconds in cpu.most_common():
            figures |= {f"cpu_s/{kind}": seconds, f"processes/{kind}": float(count[kind])}
        return figures


def _pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]
