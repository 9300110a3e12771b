"""Load benchmark of the env server: N concurrent sessions stepping envs over HTTP, then a leak check.

Phase 1 (load): `--sessions` concurrent sessions (default 256, as seed 000 runs 256 env workers),
spread round-robin over `--envs` (default babyai and countdown), each resetting to a task and
stepping with a cheap policy (an admissible action when the env lists them, else a fixed reply)
for `--seconds` (bounded). Reports steps/s, step latency p50/p99 as the client saw it, and the
server's own figures from /metrics (its latency quantiles, the RSS of the server and its workers).

Phase 2 (leak check): `--cycles` create+reset+close cycles (default 10,000) on the first env,
`--cycle-concurrency` at a time; reports server+workers RSS before (after a warm-up of 500
cycles) and after, and the difference in MB.

Everything talks to 127.0.0.1 only; the server is started and stopped by this script.

    .venv/bin/python bench/bench_env_server.py [--sessions 256] [--seconds 20] [--cycles 10000] [--json out.json] [--baseline old.json]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench._common import load_baseline, print_table, save_json  # noqa: E402
from agentrl_core.envs import launch_server  # noqa: E402
from agentrl_core.envs.server_metrics import quantile  # noqa: E402

WARMUP_CYCLES = 500
FALLBACK_ACTION = {"countdown": "<answer>1 + 2</answer>", "math": "#### 0"}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="babyai,countdown", help="comma-separated envs to load (round-robin)")
    p.add_argument("--sessions", type=int, default=256)
    p.add_argument("--seconds", type=float, default=20.0, help="length of the load phase")
    p.add_argument("--cycles", type=int, default=10_000, help="create/close cycles of the leak check (0 skips it)")
    p.add_argument("--cycle-concurrency", type=int, default=16)
    p.add_argument("--workers", type=int, default=None, help="the server's shared workers (default: one per core)")
    p.add_argument("--json", default=None, help="save the figures here")
    p.add_argument("--baseline", default=None, help="an earlier --json output to compare with")
    return p.parse_args()


def pick_action(env: str, info: dict[str, Any], rng: random.Random) -> str:
    """An admissible action when the env lists them, else a fixed well-formed reply."""
    for key in ("available_actions", "admissible_actions"):
        actions = info.get(key)
        if isinstance(actions, list) and actions:
            return str(rng.choice(actions))
    return FALLBACK_ACTION.get(env, "look")


async def session_loop(
    http: httpx.AsyncClient, env: str, task_ids: list[int], deadline: float, latencies: list[float], seed: int
) -> int:
    """One session: create, step until the deadline (resetting when an episode ends), close."""
    rng = random.Random(seed)
    created = (await http.post("/sessions", json={"env": env, "task_id": rng.choice(task_ids)})).json()
    sid, info, steps = created["session_id"], created["info"], 0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        resp = await http.post(f"/sessions/{sid}/step", json={"action": pick_action(env, info, rng)})
        latencies.append(time.perf_counter() - started)
        resp.raise_for_status()
        body = resp.json()
        steps += 1
        info = body["info"]
        if body["terminated"] or body["truncated"]:
            info = (await http.post(f"/sessions/{sid}/reset", json={"task_id": rng.choice(task_ids)})).json()["info"]
    await http.delete(f"/sessions/{sid}")
    return steps


async def load_phase(url: str, envs: list[str], sessions: int, seconds: float) -> dict[str, float]:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120.0) as http:
        tasks = {env: (await http.get(f"/envs/{env}/tasks", params={"split": "train"})).json()["task_ids"][:200] for env in envs}
        latencies: list[float] = []
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        counts = await asyncio.gather(*(
            session_loop(http, envs[i % len(envs)], tasks[envs[i % len(envs)]], deadline, latencies, i)
            for i in range(sessions)
        ))
        elapsed = time.monotonic() - started
        metrics = (await http.get("/metrics")).json()
    lat = sorted(latencies)
    return {
        "sessions": float(sessions),
        "steps": float(sum(counts)),
        "steps_per_s": sum(counts) / elapsed,
        "client_p50_ms": quantile(lat, 0.5) * 1000,
        "client_p99_ms": quantile(lat, 0.99) * 1000,
        "server_p50_ms": metrics["step_latency_ms"]["p50"],
        "server_p99_ms": metrics["step_latency_ms"]["p99"],
        "server_rss_mb": metrics["server_rss_mb"] or 0.0,
        "workers_rss_mb": metrics["workers_rss_mb"] or 0.0,
    }


async def cycle(http: httpx.AsyncClient, env: str, task_id: int) -> None:
    resp = await http.post("/sessions", json={"env": env, "task_id": task_id})
    resp.raise_for_status()
    (await http.delete(f"/sessions/{resp.json()['session_id']}")).raise_for_status()


async def cycles(http: httpx.AsyncClient, env: str, n: int, concurrency: int) -> None:
    async def runner(k: int) -> None:
        for i in range(k, n, concurrency):
            await cycle(http, env, i % 100)

    await asyncio.gather(*(runner(k) for k in range(concurrency)))


async def total_rss(http: httpx.AsyncClient) -> float:
    m = (await http.get("/metrics")).json()
    return float((m["server_rss_mb"] or 0.0) + (m["workers_rss_mb"] or 0.0))


async def leak_phase(url: str, env: str, n: int, concurrency: int) -> dict[str, float]:
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
        await cycles(http, env, WARMUP_CYCLES, concurrency)
        before = await total_rss(http)
        started = time.monotonic()
        await cycles(http, env, n, concurrency)
        elapsed = time.monotonic() - started
        after = await total_rss(http)
        live = (await http.get("/health")).json()["sessions"]
    return {"cycles": float(n), "cycles_per_s": n / elapsed, "rss_before_mb": before, "rss_after_mb": after,
            "rss_growth_mb": after - before, "live_sessions_after": float(live)}


def main() -> int:
    args = parse()
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    with launch_server(envs, max_sessions=max(1024, args.sessions * 2), workers=args.workers) as server:
        figures = asyncio.run(load_phase(server.url, envs, args.sessions, args.seconds))
        if args.cycles:
            figures |= asyncio.run(leak_phase(server.url, envs[0], args.cycles, args.cycle_concurrency))
    print_table(f"env server: {args.sessions} sessions on {', '.join(envs)}", figures, load_baseline(args.baseline))
    save_json(args.json, {"args": vars(args), "figures": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
