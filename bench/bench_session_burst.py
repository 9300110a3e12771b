"""A burst of new sessions of an env with a worker process per session (ALFWorld): how long until all are up.

An evaluation or a rollout step opens all its episodes' sessions at once (48 validation games, 32 episodes of
a GRPO step). For each `--worker-starts` value, in one run: a fresh env server started with that many
per-session worker processes allowed to start at once, then `--sessions` clients (one thread each, as the
rollout's) create a session each at the same moment with the client's default request timeout, then close it.
`--worker-starts` equal to `--sessions` is no bound (every interpreter starts at once); the server's default
is one per core.

Prints per setting: the burst's wall seconds, the median and largest creation seconds a client saw, the
creations that failed, and the per-session workers the server ran (`workers_dedicated` from /metrics: more
than the sessions means starts nobody uses).

    .venv/bin/python bench/bench_session_burst.py [--env alfworld] [--sessions 48] [--worker-starts 48 2]
        [--json out.json] [ENV KWARGS as KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
import httpx  # noqa: E402
from agentrl_core.env_service import EnvClient, launch_server  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.web.auth import auth_headers  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="alfworld")
    p.add_argument("--sessions", type=int, default=48)
    p.add_argument("--worker-starts", type=int, nargs="+", default=None,
                   help="settings to compare (default: --sessions, i.e. no bound, and one per core)")
    p.add_argument("--timeout", type=float, default=30.0, help="the client's request timeout (env.request_timeout_s)")
    p.add_argument("--json")
    p.add_argument("kwargs", nargs="*", help="env constructor kwargs, KEY=VALUE (JSON values)")
    args = p.parse_args()
    if args.sessions < 1 or any(n < 1 for n in args.worker_starts or []):
        p.error("--sessions and --worker-starts must be >= 1")
    return args


def env_kwargs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"env kwargs are KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def create_one(url: str, env: str, task_id: int, timeout: float) -> tuple[float, str | None, int | None]:
    """(seconds, the error's type or None, the session id)."""
    with EnvClient(url, timeout=timeout) as client:
        began = time.perf_counter()
        try:
            sid, _, _ = client.create(env, task_id)
            return time.perf_counter() - began, None, sid
        except Exception as err:  # counted and reported: the figure is how many fail
            return time.perf_counter() - began, type(err).__name__, None


def burst(args: argparse.Namespace, starts: int, kwargs: dict) -> dict[str, float]:
    with launch_server([args.env], env_kwargs={args.env: kwargs}, worker_starts=starts,
                       max_sessions=max(1024, 4 * args.sessions)) as server:
        with EnvClient(server.url) as client:
            ids = client.task_ids(args.env, "train")[: args.sessions]
            ids = (ids * (args.sessions // len(ids) + 1))[: args.sessions]
            began = time.perf_counter()
            with ThreadPoolExecutor(args.sessions) as pool:
                results = list(pool.map(lambda t: create_one(server.url, args.env, t, args.timeout), ids))
            wall = time.perf_counter() - began
            workers = httpx.get(f"{server.url}/metrics", headers=auth_headers()).json()["workers_dedicated"]
            for _, _, sid in results:
                if sid is not None:
                    client.close_session(sid)
    seconds = [s for s, _, _ in results]
    return {"wall_s": wall, "median_create_s": statistics.median(seconds), "max_create_s": max(seconds),
            "failed": float(sum(err is not None for _, err, _ in results)), "workers_started": float(workers)}


def main() -> None:
    args = parse()
    settings = args.worker_starts or [args.sessions, os.cpu_count() or 1]
    kwargs = env_kwargs(args.kwargs)
    print(describe_cpu())
    figures: dict[str, float] = {}
    for starts in settings:
        row = burst(args, starts, kwargs)
        print(f"worker-starts {starts}: " + json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
        figures.update({f"{k} (starts {starts})": v for k, v in row.items()})
    print_table(f"{args.sessions} {args.env} sessions created at once, client timeout {args.timeout:g} s", figures)
    save_json(args.json or "runs/bench-session-burst.json",
              {"args": vars(args), "cpu": describe_cpu(), "figures": figures})


if __name__ == "__main__":
    run_recorded("session_burst", main)
