"""The ALFWorld engine with and without the memoized TextWorld parses (agentrl_core/envs/alfworld/parse_cache.py).

Plays the same games both ways, side by side (the order alternates per round, so a busy neighbour slows both
alike): each game generated and loaded, reset, a few commands that change nothing ("look", "inventory", an
invalid one), then the planner's commands to the win. Prints seconds per game each way, the speed-up, and
whether the two transcripts (every observation and every list of admissible commands) are identical.

    .venv/bin/python bench/bench_alfworld_engine.py [--games 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402

PROBES = ("look", "inventory", "fly to the moon")
"""Commands played before the plan: two that describe, one the engine refuses; none changes the state."""


def transcript(engine: Any, task_ids: list[int]) -> list[tuple[str, tuple[str, ...]]]:
    """(observation, admissible commands) after the reset and after each command of each game, in order."""
    from agentrl_core.envs.alfworld import generate_game

    out = []
    for task_id in task_ids:
        game = generate_game(task_id, engine=engine)
        state = engine.reset()
        out.append((state["feedback"], tuple(state["admissible_commands"])))
        for command in [*PROBES, *game.plan]:
            state, _, _ = engine.step(command)
            out.append((state["feedback"], tuple(state["admissible_commands"])))
        assert state["won"], f"game {task_id}: the planner's commands did not win"
    return out


def timed(cached: bool, task_ids: list[int]) -> tuple[float, list]:
    from agentrl_core.envs.alfworld import parse_cache
    from agentrl_core.envs.alfworld.gamefile import make_engine

    engine = make_engine(admissible=True)  # installs the cache
    if not cached:
        parse_cache.uninstall()
    try:
        start = time.perf_counter()
        played = transcript(engine, task_ids)
        return time.perf_counter() - start, played
    finally:
        engine.close()
        parse_cache.install()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=int, default=12, help="games per round (ids 0, 25, 50, ...: all six task types)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each playing the games both ways")
    return p.parse_args()


def main() -> None:
    args = parse()
    ids = list(range(0, 25 * args.games, 25))
    seconds = {True: 0.0, False: 0.0}
    same = True
    for r in range(args.rounds):
        runs = {cached: timed(cached, ids) for cached in ((True, False) if r % 2 else (False, True))}
        same &= runs[True][1] == runs[False][1]
        for cached, (s, _) in runs.items():
            seconds[cached] += s
    n = args.games * args.rounds
    figures = {"s_per_game_textworld": seconds[False] / n, "s_per_game_memoized": seconds[True] / n,
               "speedup": seconds[False] / seconds[True], "games": n, "identical_transcripts": float(same)}
    print_table(f"ALFWorld engine, {args.games} games x {args.rounds} rounds, each way", figures)
    save_json(None, {"args": vars(args), "figures": figures})
    if not same:
        raise SystemExit("the transcripts differ with the memoized parses")


if __name__ == "__main__":
    run_recorded("alfworld_engine", main)
