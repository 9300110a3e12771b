"""GPU slots: one Prefect global concurrency limit per GPU (gpu-0, gpu-1, …), held while a stage runs.

`deployments/local_stack.sh` creates the limits (`prefect gcl create gpu-<i> --limit 1` for each GPU
`nvidia-smi -L` lists). A stage takes the GPUs it needs all at once or none (it releases a partial
set and tries again), so two flow runs never deadlock holding half of each other's GPUs, and
CUDA_VISIBLE_DEVICES is set to the ones it holds. On a machine without a GPU nothing is held.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack, contextmanager
from typing import Iterator

from prefect.concurrency.sync import concurrency

from agentrl_core.config import RecipeConfig

LIMIT_PREFIX = "gpu-"


def visible_gpus() -> int:
    """GPUs this process can use (0 without CUDA); counting does not initialise a CUDA context."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpus_needed(recipe: RecipeConfig, available: int) -> int:
    """GPUs a stage of `recipe` holds: those it asks of Ray, else one; none on a CPU-only machine."""
    if available == 0:
        return 0
    ask = recipe.distributed.train_gpus + int(round(recipe.distributed.rollout_gpus))
    return min(available, max(1, ask))


def _try_all(stack: ExitStack, ids: range, count: int) -> list[int]:
    held: list[int] = []
    for i in ids:
        try:
            stack.enter_context(concurrency(f"{LIMIT_PREFIX}{i}", occupy=1, timeout_seconds=1, strict=True))
        except TimeoutError:
            continue
        held.append(i)
        if len(held) == count:
            break
    return held


@contextmanager
def gpu_slots(count: int, gpus: int, *, wait_s: float = 5.0, timeout_s: float | None = None) -> Iterator[list[int]]:
    """Hold `count` of the `gpus` per-GPU limits for the body; yields the GPU ids held."""
    if count <= 0:
        yield []
        return
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        with ExitStack() as stack:
            held = _try_all(stack, range(gpus), count)
            if len(held) == count:
                previous = os.environ.get("CUDA_VISIBLE_DEVICES")
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, held))
                try:
                    yield held
                finally:
                    _restore("CUDA_VISIBLE_DEVICES", previous)
                return
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"could not hold {count} of {gpus} GPU slots ({LIMIT_PREFIX}0…) within {timeout_s} s")
        time.sleep(wait_s)


def _restore(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


@contextmanager
def stage_gpus(recipe: RecipeConfig) -> Iterator[list[int]]:
    """The GPU slots a training or evaluation stage of `recipe` needs on this machine."""
    gpus = visible_gpus()
    with gpu_slots(gpus_needed(recipe, gpus), gpus) as held:
        yield held
