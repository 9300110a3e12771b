"""Named, timed blocks: each phase of a step records its wall time."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def timed(name: str, into: dict[str, float]) -> Iterator[None]:
    """Add the block's wall seconds to into[f"time/{name}_s"]."""
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"time/{name}_s"
        into[key] = into.get(key, 0.0) + time.perf_counter() - start
