"""A writer process for the concurrency test: `python -m tests.store.workers URL ROOT WORKER N`."""

from __future__ import annotations

import sys

from agentrl_core.store import open_registry


def write(url: str, root: str, worker: int, n: int) -> None:
    """Open the (maybe fresh) registry and write `n` single-row transactions of each kind."""
    reg = open_registry(url, root)
    try:
        run_id = reg.ensure_run("shared", recipe={})
        for step in range(n):
            reg.log_metrics(run_id, stage="rl", step=step, metrics={f"w{worker}": float(step)})
            reg.add_checkpoint(run_id, stage="rl", step=step, uri=f"mem://w{worker}/{step}", kind="train")
    finally:
        reg.close()


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
