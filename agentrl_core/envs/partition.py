"""Held out in content by construction: a stable hash splits the space of scenes into train and test parts.

A generator that draws a scene for a task id can still draw, for a test id, a scene some training
id also drew (the same layout with the same objects in the same places). Splitting the *content*
space instead of the id space rules that out for every pair of ids: each scene key falls in
exactly one part,

    part(key) = "test"  if  H(repr(key)) mod share == 0  else  "train",

with H the first 8 bytes of BLAKE2b (stable across processes, machines and Python versions, unlike
`hash`), and a generator keeps drawing for a test id until the scene's part is "test" (and for a
train id until it is "train"). About one scene in `share` is a test scene; the goal alone may
repeat (the same kind of task in a new scene is fair, as in ALFWorld's unseen split).
"""

from __future__ import annotations

import hashlib
from typing import Hashable

TEST_SHARE = 8
"""One scene key in TEST_SHARE belongs to the test part."""


def content_part(key: Hashable, share: int = TEST_SHARE) -> str:
    """"test" or "train": the part of the content space `key` falls in (module docstring)."""
    if share < 2:
        raise ValueError(f"share must be >= 2 (one key in `share` is a test key), got {share}")
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") % share == 0 else "train"


def fits_part(key: Hashable, held_out: bool, share: int = TEST_SHARE) -> bool:
    """Whether a scene with `key` may be the scene of a test task (`held_out`) or of a training task."""
    return content_part(key, share) == ("test" if held_out else "train")
