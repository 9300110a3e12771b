"""Episode metrics: shares an environment reports about an episode besides its reward and success.

An environment may put `info["episode_metrics"] = {"name": value, ...}` on any step; each value is a
share in [0, 1] (e.g. BFCL's "well_formed": 1.0 when every reply kept the format and every call named a
function the model was shown). The rollout loop keeps the latest report of each episode, so an episode
the loop cuts short (its context full) still carries what was true of it so far. Evaluation averages
each metric over the scored episodes with the same 95% interval as success, and compares models on it
task by task (`evaluation.metrics`, `evaluation.report`); training logs its mean per step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

EPISODE_METRICS = "episode_metrics"
"""info key (and Trajectory.extra key): {metric name: share in [0, 1]} of the episode so far."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
RESERVED = frozenset({"success", "reward", "steps", "model"})
"""Names a metric may not take: they are the evaluation's own columns."""


def check_episode_metrics(value: Any) -> dict[str, float]:
    """`value` as {name: float}, or ValueError saying what is wrong.

    Names are lower-case identifiers (at most 48 characters, not one of RESERVED); values are finite
    numbers in [0, 1], i.e. shares, so that their means carry a binomial interval.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"info[{EPISODE_METRICS!r}] must be a mapping of name -> share in [0, 1], "
                         f"got {type(value).__name__}")
    out: dict[str, float] = {}
    for name, share in value.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in RESERVED:
            raise ValueError(f"episode metric name {name!r} must be a lower-case identifier (a-z, 0-9, _; at most "
                             f"48 characters) and not one of {sorted(RESERVED)}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) \
                or not 0.0 <= share <= 1.0:
            raise ValueError(f"episode metric {name!r} must be a number in [0, 1] (a share), got {share!r}")
        out[name] = float(share)
    return out
