"""One random generator per sequence, so a sequence's samples do not depend on what is batched beside it."""

from __future__ import annotations

import hashlib

import torch


def sequence_seed(seed: int, index: int) -> int:
    """A 63-bit generator seed for sequence `index` of a call seeded `seed` (stable across runs and platforms)."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def make_generator(seed: int, index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator seeded for sequence `index` of a call seeded `seed`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(sequence_seed(seed, index))
    return gen
