"""Count, in played episodes, the commands that were not on the observation's "Actions:" line (household,
ALFWorld with every command listed) and the immediate repeats of a command; one line per trajectory file.

    .venv/bin/python bench/invalid_actions.py LABEL=runs/.../eval/NAME/trajectories.parquet ...
"""

from __future__ import annotations

import sys

import pyarrow.parquet as pq


def listed(observation: str) -> list[str] | None:
    """The commands of the observation's last "Actions:" line, or None when it has none."""
    lines = [line for line in observation.splitlines() if line.startswith("Actions:")]
    return [a.strip() for a in lines[-1].removeprefix("Actions:").split("|")] if lines else None


def count(path: str) -> tuple[int, int, int, int]:
    """(episodes, commands, commands not listed, immediate repeats) of one trajectory file."""
    rows = pq.read_table(path, columns=["messages"]).to_pylist()
    commands = invalid = repeats = 0
    for row in rows:
        messages, previous = row["messages"], None
        for i, message in enumerate(messages):
            if message["role"] != "assistant" or i == 0:
                continue
            action, options = message["content"].strip(), listed(messages[i - 1]["content"])
            commands += 1
            invalid += options is not None and action not in options
            repeats += action == previous
            previous = action
    return len(rows), commands, invalid, repeats


def main() -> None:
    for arg in sys.argv[1:]:
        label, _, path = arg.partition("=")
        episodes, commands, invalid, repeats = count(path)
        print(f"{label}: {episodes} episodes, {commands} commands, not listed {invalid} "
              f"({invalid / max(1, commands):.1%}), immediate repeats {repeats}")


if __name__ == "__main__":
    main()
