"""What the server's /metrics route reports: steps/s, step latency quantiles, memory.

Latencies are kept for the last `window` steps (a bounded ring), so memory stays flat however
long the server runs. steps/s = steps finished in the last `rate_window_s` seconds / that window.
Quantiles are nearest-rank: q-quantile of n sorted values = v[ceil(q*n) - 1].
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Callable, Iterable


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an already sorted list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def rss_mb(pid: int | None = None) -> float | None:
    """Resident memory of a process in MiB (Linux /proc), None where unavailable."""
    try:
        with open(f"/proc/{pid or os.getpid()}/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class StepStats:
    """Counts and latencies of env steps, overall and per env."""

    def __init__(self, window: int = 10_000, rate_window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.rate_window_s = rate_window_s
        self.latencies: deque[float] = deque(maxlen=window)
        self.finished: deque[float] = deque(maxlen=window)  # finish times, for steps/s
        self.steps_total = 0
        self.steps_by_env: dict[str, int] = {}
        self.steps_repeated = 0
        """Steps a client sent again (its answer lost on the way) that got their result again, not applied twice."""

    def record(self, env_name: str, seconds: float) -> None:
        self.latencies.append(seconds)
        self.finished.append(self.clock())
        self.steps_total += 1
        self.steps_by_env[env_name] = self.steps_by_env.get(env_name, 0) + 1

    def steps_per_s(self) -> float:
        """Steps finished in the last `rate_window_s` seconds, per second. When more steps finished in that
        window than the kept `window` of finish times holds, the rate is taken over the span the kept ones
        cover (count / (now − oldest kept)): dividing by the whole window would cap it at window / rate_window_s."""
        now = self.clock()
        recent = [t for t in self.finished if t >= now - self.rate_window_s]
        if recent and len(recent) == self.finished.maxlen:
            return len(recent) / max(now - recent[0], 1e-9)
        return len(recent) / self.rate_window_s

    def latency_ms(self, qs: Iterable[float] = (0.5, 0.9, 0.99)) -> dict[str, float]:
        values = sorted(self.latencies)
        out = {f"p{round(q * 100)}": round(quantile(values, q) * 1000, 3) for q in qs}
        out["max"] = round(values[-1] * 1000, 3) if values else 0.0
        return out
