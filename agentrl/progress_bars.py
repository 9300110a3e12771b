"""Rich progress bars for agentrl_core.system.progress reports (one bar per key)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RichBars:
    """A `Reporter` drawing one bar per key; use as a context manager around the work."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console)
        self.bars: dict[str, int] = {}

    def update(self, key: str, done: int, total: int, description: str) -> None:
        if key not in self.bars:
            self.bars[key] = self.progress.add_task(description, total=total)
        self.progress.update(self.bars[key], completed=done, total=total, description=description)

    def __enter__(self) -> "RichBars":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
