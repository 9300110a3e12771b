"""Random-number-generator state (python, numpy, torch CPU and CUDA) as a torch-loadable dict.

Everything is stored as plain Python values or tensors, so `torch.load(weights_only=True)` reads
it back without unpickling arbitrary objects.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng_state() -> dict:
    """Snapshot every global RNG this process draws from."""
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Put back a snapshot from `capture_rng_state` (CUDA only when saved and available)."""
    version, internal, gauss_next = state["python"]
    # weights_only loading may hand tuples back as lists; random.setstate needs tuples.
    random.setstate((version, tuple(internal), gauss_next))
    np_saved = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_saved["bit_generator"],
            "state": {"key": np_saved["key"].numpy().astype(np.uint32), "pos": np_saved["pos"]},
            "has_gauss": np_saved["has_gauss"],
            "gauss": np_saved["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        # A run resumed on fewer devices restores what it can, one state per visible device.
        for index, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)
