"""Count the commands an agent gave that the game did not accept, per played model; one line per source.

A source is either
- a trajectory file a run kept (`runs/.../eval/NAME/trajectories.parquet`): the commands that were not on the
  observation's "Actions:" line (household, ALFWorld with every command listed), the one given most often, and the
  immediate repeats of a command, read from the messages; or
- a recorded results file and one of its models (`bench/results/RECORD.json#ARM`, `tests/ARM` of
  `bench/bench_multiturn.py`), for when the run's folders are gone. The environment's own count: the share of
  refused commands per episode (`invalid_action_rate`, which every evaluation records), or, in a record older than
  that metric whose run penalised refused commands (`env.kwargs.invalid_action_penalty=p` among its overrides), the
  count its rewards imply: an episode's return is 1[goal] - p * (refused commands), so

      refused = n_episodes * (success_rate - mean_reward) / p,    commands = n_episodes * mean_steps.

  A record from a modified working tree is refused (`--allow-dirty-source` reads it anyway, saying so).

    .venv/bin/python bench/invalid_actions.py LABEL=runs/.../eval/NAME/trajectories.parquet \\
        LABEL=bench/results/multiturn_household_penalty.json#sft-seed0 ...
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl_core.evaluation.stats import format_rate  # noqa: E402
from agentrl_core.recipes import parse_override  # noqa: E402
from bench.recorded_tests import SourceError, named_source, recorded_test  # noqa: E402

PENALTY_PATH = ["env", "kwargs", "invalid_action_penalty"]


def listed(observation: str) -> list[str] | None:
    """The commands of the observation's last "Actions:" line, or None when it has none."""
    lines = [line for line in observation.splitlines() if line.startswith("Actions:")]
    return [a.strip() for a in lines[-1].removeprefix("Actions:").split("|")] if lines else None


def count(path: str) -> tuple[int, int, Counter[str], int]:
    """(episodes, commands, how often each command not listed was given, immediate repeats) of one trajectory
    file."""
    rows = pq.read_table(path, columns=["messages"]).to_pylist()
    commands = repeats = 0
    invalid: Counter[str] = Counter()
    for row in rows:
        messages, previous = row["messages"], None
        for i, message in enumerate(messages):
            if message["role"] != "assistant" or i == 0:
                continue
            action, options = message["content"].strip(), listed(messages[i - 1]["content"])
            commands += 1
            if options is not None and action not in options:
                invalid[action] += 1
            repeats += action == previous
            previous = action
    return len(rows), commands, invalid, repeats


def trajectory_line(label: str, path: str) -> str:
    if not Path(path).is_file():
        raise SourceError(f"{path}: no such trajectory file (or give RECORD.json#ARM)")
    episodes, commands, invalid, repeats = count(path)
    total = sum(invalid.values())
    most = "".join(f", most often {command!r} ({n})" for command, n in invalid.most_common(1))
    return (f"{label}: {episodes} episodes, {commands} commands, not listed {total} "
            f"({total / max(1, commands):.1%}){most}, immediate repeats {repeats}")


def penalty(doc: dict[str, Any]) -> float:
    """p of the record's `env.kwargs.invalid_action_penalty=p` override, the last one winning (0 when none)."""
    parsed = [parse_override(o) for o in (doc.get("args") or {}).get("overrides") or [] if isinstance(o, str)]
    values = [value for path, value in parsed if path == PENALTY_PATH]
    return float(values[-1]) if values else 0.0


def whole(value: float, what: str, where: str) -> int:
    """`value` as the whole count it must be (the record's means carry float rounding, nothing more)."""
    if abs(value - round(value)) > 1e-3:
        raise SourceError(f"{where}: {what} comes to {value:.4f}, not a whole count: its rewards are not "
                          "1[goal] - p * refused commands, so they cannot be read as a count")
    return int(round(value))


def derived_counts(test: dict[str, Any], p: float, where: str) -> tuple[int, int]:
    """(commands, refused commands) implied by a record's means: n * mean_steps, n * (success - reward) / p."""
    n = int(test["n_episodes"])
    if test.get("n_errors"):
        raise SourceError(f"{where}: {test['n_errors']} episodes ended in an error; their turns are not in the means")
    commands = whole(n * float(test["mean_steps"]), "n_episodes * mean_steps", where)
    refused = whole(n * (float(test["success_rate"]) - float(test["mean_reward"])) / p, "the refused count", where)
    return commands, refused


def record_line(label: str, source: str, allow_dirty: bool) -> str:
    path, _, arm = source.partition("#")
    test, doc, where = recorded_test(path, arm, allow_dirty)
    rate = (test.get("metrics") or {}).get("invalid_action_rate")
    if rate:
        return (f"{label}: refused commands per turn, mean over episodes "
                f"{format_rate(rate['mean'], rate['low'], rate['high'], int(rate['n']))} ({where})")
    p = penalty(doc)
    if p <= 0:
        raise SourceError(f"{where}: no invalid_action_rate and no env.kwargs.invalid_action_penalty=p override, so neither the record "
                          "nor its rewards count refused commands: count them from the run's trajectory file, or "
                          "play the run again (every evaluation now records invalid_action_rate)")
    commands, refused = derived_counts(test, p, where)
    return (f"{label}: {test['n_episodes']} episodes, {commands} commands, refused {refused} "
            f"({refused / max(1, commands):.1%}), from its rewards at p = {p:g} ({where})")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", type=named_source, metavar="LABEL=SOURCE",
                   help="a trajectories.parquet file, or RECORD.json#ARM")
    p.add_argument("--allow-dirty-source", action="store_true",
                   help="read a results file recorded from a modified working tree (its line says so)")
    args = p.parse_args(argv)
    try:
        lines = [record_line(label, source, args.allow_dirty_source) if "#" in source
                 else trajectory_line(label, source) for label, source in args.sources]
    except SourceError as exc:
        print(f"invalid_actions: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
