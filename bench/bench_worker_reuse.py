"""Episodes of a dedicated-worker env as a rollout plays them, with the env server's idle workers kept or not.

A rollout opens a session per episode. ALFWorld runs each session in a worker process of its own; with
`reuse_worker` (agentrl_core/env_service/pool.py) a worker whose session closed serves the env's next session
instead of a new interpreter importing the engine again. This plays the same episodes both ways, side by side
(the order alternates per round): `--parallel` sessions at a time, each created and reset to its task, stepped
`--steps` times with an admissible command, and closed. Prints seconds per episode each way, the speed-up,
the CPU seconds of the server's process tree, and how many sessions got a reused worker.

    .venv/bin/python bench/bench_worker_reuse.py [--env alfworld] [--episodes 24] [--parallel 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402


def children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (the server's worker processes, once they exit)."""
    usage = os.times()
    return usage.children_user + usage.children_system


def play(client, env: str, task_id: int, steps: int) -> None:  # noqa: ANN001
    created = client.post("/sessions", json={"env": env, "task_id": task_id}).json()  # created and reset
    sid, info = created["session_id"], created["info"]
    try:
        for _ in range(steps):
            actions = info.get("available_actions") or ["look"]
            info = client.post(f"/sessions/{sid}/step", json={"action": actions[0]}).json()["info"]
    finally:
        client.delete(f"/sessions/{sid}")


def timed(keep: bool, args: argparse.Namespace, task_ids: list[int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the server's workers, sessions on reused workers) for one way."""
    from fastapi.testclient import TestClient

    from agentrl_core.env_service.server import create_app

    before_cpu = children_cpu_s()
    app = create_app([args.env], workers=1, idle_workers=None if keep else 0)
    with TestClient(app) as client, ThreadPoolExecutor(args.parallel) as pool:
        start = time.perf_counter()
        list(pool.map(lambda t: play(client, args.env, t, args.steps), task_ids))
        wall = time.perf_counter() - start
        reused = client.get("/metrics").json()["sessions_on_reused_workers"]
    return wall, children_cpu_s() - before_cpu, reused


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="alfworld", help="a dedicated-worker env that reuses its workers")
    p.add_argument("--episodes", type=int, default=24, help="episodes per round and way (task ids 0, 1, ...)")
    p.add_argument("--parallel", type=int, default=4, help="sessions open at once, as a rollout's episodes are")
    p.add_argument("--steps", type=int, default=3, help="steps per episode")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each playing the episodes both ways")
    return p.parse_args()


def main() -> None:
    args = parse()
    ids = list(range(args.episodes))
    wall, cpu, reused = {True: 0.0, False: 0.0}, {True: 0.0, False: 0.0}, {True: 0, False: 0}
    for r in range(args.rounds):
        for keep in ((True, False) if r % 2 else (False, True)):
            w, c, n = timed(keep, args, ids)
            wall[keep] += w
            cpu[keep] += c
            reused[keep] += n
    n = args.episodes * args.rounds
    figures = {"s_per_episode_new_process": wall[False] / n, "s_per_episode_reused": wall[True] / n,
               "speedup": wall[False] / wall[True], "worker_cpu_s_per_episode_new_process": cpu[False] / n,
               "worker_cpu_s_per_episode_reused": cpu[True] / n, "episodes": n,
               "sessions_on_reused_workers": reused[True], "sessions_on_reused_workers_when_off": reused[False]}
    print_table(f"{args.env}: {args.episodes} episodes x {args.rounds} rounds each way, {args.parallel} at once, "
                f"{args.steps} steps each", figures)
    save_json(None, {"args": vars(args), "figures": figures})


if __name__ == "__main__":
    run_recorded("worker_reuse", main)
