"""Progress reporting: long work reports (key, done, total); whoever runs it decides how to show it."""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    """Receives progress of named pieces of work (a stage, an evaluation)."""

    def update(self, key: str, done: int, total: int, description: str) -> None:
        ...


_reporter: Reporter | None = None


def set_reporter(reporter: Reporter | None) -> None:
    """Install (or remove, with None) the process-wide reporter, e.g. a progress bar of the CLI."""
    global _reporter
    _reporter = reporter


def report(key: str, done: int, total: int, description: str = "") -> None:
    """Tell the reporter, if any, that `done` of `total` units of `key` are finished."""
    if _reporter is not None:
        _reporter.update(key, done, total, description or key)
