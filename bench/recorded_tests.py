"""A model's scored test episodes as a benchmark results file recorded them (`tests/ARM` of
`bench/bench_multiturn.py`'s JSON), read back only from a file recorded at a commit: a file recorded from a modified
working tree (`git_dirty` not false) has no commit that reproduces it, so it cannot back a published figure
(`allow_dirty` reads it anyway, its provenance saying so)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


class SourceError(ValueError):
    """A model's outcomes cannot be read from what was named (says what is wrong and how to fix it)."""


def recorded_test(path: str, arm: str, allow_dirty: bool = False) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(tests/ARM, the whole results file, provenance "PATH #ARM, recorded at REV, clean|MODIFIED working tree")."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SourceError(f"{path}: not a readable results file ({exc})") from exc
    tests = doc.get("tests") if isinstance(doc, dict) else None
    if not isinstance(tests, dict) or not tests:
        raise SourceError(f"{path}: no scored models (`tests`): name a results file of bench/bench_multiturn.py")
    if not isinstance(tests.get(arm), dict):
        raise SourceError(f"{path}: no scored model {arm!r}; its models are {sorted(tests)}")
    revision = str(doc.get("git_revision") or "?")[:8]
    if doc.get("git_dirty") is not False and not allow_dirty:
        raise SourceError(f"{path} was recorded from a modified working tree (at {revision}): no commit reproduces "
                          "it; record its run again at a commit, or pass --allow-dirty-source to read it anyway")
    state = "clean" if doc.get("git_dirty") is False else "MODIFIED working tree"
    return tests[arm], doc, f"{path} #{arm}, recorded at {revision}, {state}"


def named_source(text: str) -> tuple[str, str]:
    """argparse type of a `NAME=SOURCE` argument (SOURCE: a trajectory file or RECORD.json#ARM)."""
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise argparse.ArgumentTypeError(f"give NAME=SOURCE, got {text!r}")
    return name, source
