"""Load benchmark of the env server: N concurrent sessions stepping envs over HTTP, then a leak check.

Phase 1 (load): `--sessions` concurrent sessions (default 256, as AgentEvolver's ALFWorld run uses 256 env workers),
spread round-robin over `--envs` (default babyai and countdown), each resetting to a task and
stepping with a cheap policy (an admissible action when the env lists them, else a fixed reply)
for `--seconds` (bounded). Reports steps/s, step latency p50/p99 as the client saw it, and the
server's own figures from /metrics (its latency quantiles, the RSS of the server and its workers).

Phase 0 (baseline): the same policy stepping the same envs in one plain Python process, no
server (round-robin over `--envs`), for `--baseline-seconds`; the load phase's steps/s is then
reported as a multiple of it (the target is >= 1.8x one engine process on 2 cores).

`--think-ms` adds a pause between a session's steps (uniform in [0, 2*think], mean think), as an
LLM's generation time does in training. With no pause (the default) every session steps as fast as
it can, so latency is queueing: by Little's law, latency = sessions / throughput.

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

import aiohttp  # noqa: E402
import httpx  # noqa: E402

from bench._common import load_baseline, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.env_service import launch_server  # noqa: E402
from agentrl_core.env_service.server_metrics import quantile  # noqa: E402

WARMUP_CYCLES = 500
FALLBACK_ACTION = {"countdown": "<answer>1 + 2</answer>", "math": "#### 0"}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="babyai,countdown", help="comma-separated envs to load (round-robin)")
    p.add_argument("--sessions", type=int, default=256)
    p.add_argument("--seconds", type=float, default=20.0, help="length of the load phase")
    p.add_argument("--client-procs", type=int, default=4, help="client processes sharing the sessions (one asyncio loop each)")
    p.add_argument("--think-ms", type=float, default=0.0, help="mean pause between a session's steps (an LLM turn)")
    p.add_argument("--baseline-seconds", type=float, default=5.0, help="length of the in-process baseline (0 skips it)")
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


async def post(http: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(path, json=body) as resp:
        resp.raise_for_status()
        return await resp.json()


def in_process_rate(envs: list[str], seconds: float) -> float:
    """Steps/s of the same policy on the same envs in this process, no server (round-robin)."""
    from agentrl_core.envs import make

    rng = random.Random(0)
    instances = {name: make(name) for name in envs}
    ids = {name: list(e.task_ids("train"))[:200] for name, e in instances.items()}
    infos = {name: e.reset(task_id=rng.choice(ids[name]))[1] for name, e in instances.items()}
    steps, deadline, started = 0, time.monotonic() + seconds, time.monotonic()
    while time.monotonic() < deadline:
        for name, env in instances.items():
            r = env.step(pick_action(name, infos[name], rng))
            infos[name] = r.info
            steps += 1
            if r.terminated or r.truncated:
                infos[name] = env.reset(task_id=rng.choice(ids[name]))[1]
    elapsed = time.monotonic() - started
    for env in instances.values():
        env.close()
    return steps / elapsed


async def session_loop(
    http: aiohttp.ClientSession, env: str, task_ids: list[int], deadline: float, latencies: list[float], seed: int,
    think_s: float = 0.0,
) -> int:
    """One session: create, step until the deadline (resetting when an episode ends), close."""
    rng = random.Random(seed)
    created = await post(http, "/sessions", {"env": env, "task_id": rng.choice(task_ids)})
    sid, info, steps = created["session_id"], created["info"], 0
    while time.monotonic() < deadline:
        if think_s:
            await asyncio.sleep(rng.uniform(0, 2 * think_s))
        started = time.perf_counter()
        body = await post(http, f"/sessions/{sid}/step", {"action": pick_action(env, info, rng)})
        latencies.append(time.perf_counter() - started)
        steps += 1
        info = body["info"]
        if body["terminated"] or body["truncated"]:
            info = (await post(http, f"/sessions/{sid}/reset", {"task_id": rng.choice(task_ids)}))["info"]
    async with http.delete(f"/sessions/{sid}") as resp:
        resp.raise_for_status()
    return steps


async def client_loops(
    url: str, envs: list[str], ids: list[int], deadline: float, think_s: float
) -> tuple[int, list[float]]:
    """One client process: sessions `ids` (round-robin over envs) on one asyncio loop (aiohttp: httpx's
    async pool costs O(connections) per request and would be the bottleneck)."""
    connector = aiohttp.TCPConnector(limit=len(ids))
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(base_url=url, connector=connector, timeout=timeout) as http:
        tasks = {}
        for env in envs:
            async with http.get(f"/envs/{env}/tasks", params={"split": "train"}) as resp:
                tasks[env] = (await resp.json())["task_ids"][:200]
        latencies: list[float] = []
        counts = await asyncio.gather(*(
            session_loop(http, envs[i % len(envs)], tasks[envs[i % len(envs)]], deadline, latencies, i, think_s)
            for i in ids
        ))
    return sum(counts), latencies


def client_process(
    url: str, envs: list[str], ids: list[int], deadline_wall: float, think_s: float
) -> tuple[int, list[float]]:
    """Entry point of a client process (the deadline is wall-clock time, shared by every process)."""
    return asyncio.run(client_loops(url, envs, ids, time.monotonic() + (deadline_wall - time.time()), think_s))


def load_phase(url: str, envs: list[str], sessions: int, seconds: float, procs: int, think_s: float) -> dict[str, float]:
    """Sessions split over `procs` client processes (one Python loop cannot drive hundreds of
    connections without becoming the bottleneck itself)."""
    from concurrent.futures import ProcessPoolExecutor

    groups = [list(range(k, sessions, procs)) for k in range(procs)]
    started = time.monotonic()
    with ProcessPoolExecutor(procs) as ex:
        results = list(ex.map(
            client_process, [url] * procs, [envs] * procs, groups, [time.time() + seconds] * procs, [think_s] * procs
        ))
    elapsed = time.monotonic() - started
    metrics = httpx.get(f"{url}/metrics", timeout=30).json()
    steps = sum(r[0] for r in results)
    lat = sorted(x for r in results for x in r[1])
    return {
        "sessions": float(sessions),
        "steps": float(steps),
        "steps_per_s": steps / elapsed,
        "client_p50_ms": quantile(lat, 0.5) * 1000,
        "client_p99_ms": quantile(lat, 0.99) * 1000,
        "steady_steps_per_s": metrics["steps_per_s"],  # the server's count over the last 10 s (no start-up)
        "server_p50_ms": metrics["step_latency_ms"]["p50"],
        "server_p99_ms": metrics["step_latency_ms"]["p99"],
        "server_rss_mb": metrics["server_rss_mb"] or 0.0,
        "workers_rss_mb": metrics["workers_rss_mb"] or 0.0,
    }


async def cycle(http: aiohttp.ClientSession, env: str, task_id: int) -> None:
    created = await post(http, "/sessions", {"env": env, "task_id": task_id})
    async with http.delete(f"/sessions/{created['session_id']}") as resp:
        resp.raise_for_status()


async def cycles(http: aiohttp.ClientSession, env: str, n: int, concurrency: int) -> None:
    async def runner(k: int) -> None:
        for i in range(k, n, concurrency):
            await cycle(http, env, i % 100)

    await asyncio.gather(*(runner(k) for k in range(concurrency)))


async def get(http: aiohttp.ClientSession, path: str) -> Any:
    async with http.get(path) as resp:
        resp.raise_for_status()
        return await resp.json()


async def total_rss(http: aiohttp.ClientSession) -> float:
    m = await get(http, "/metrics")
    return float((m["server_rss_mb"] or 0.0) + (m["workers_rss_mb"] or 0.0))


async def leak_phase(url: str, env: str, n: int, concurrency: int) -> dict[str, float]:
    async with aiohttp.ClientSession(base_url=url, timeout=aiohttp.ClientTimeout(total=60)) as http:
        await cycles(http, env, WARMUP_CYCLES, concurrency)
        before = await total_rss(http)
        started = time.monotonic()
        await cycles(http, env, n, concurrency)
        elapsed = time.monotonic() - started
        after = await total_rss(http)
        live = (await get(http, "/health"))["sessions"]
    return {"cycles": float(n), "cycles_per_s": n / elapsed, "rss_before_mb": before, "rss_after_mb": after,
            "rss_growth_mb": after - before, "live_sessions_after": float(live)}


def main() -> int:
    args = parse()
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    figures: dict[str, float] = {}
    if args.baseline_seconds:
        figures["one_process_steps_per_s"] = in_process_rate(envs, args.baseline_seconds)
    with launch_server(envs, max_sessions=max(1024, args.sessions * 2), workers=args.workers) as server:
        figures |= load_phase(server.url, envs, args.sessions, args.seconds, args.client_procs, args.think_ms / 1000)
        if "one_process_steps_per_s" in figures:
            figures["vs_one_process"] = figures["steady_steps_per_s"] / figures["one_process_steps_per_s"]
        if args.cycles:
            figures |= asyncio.run(leak_phase(server.url, envs[0], args.cycles, args.cycle_concurrency))
    print_table(f"env server: {args.sessions} sessions on {', '.join(envs)}", figures, load_baseline(args.baseline))
    save_json(args.json, {"args": vars(args), "figures": figures})
    return 0


if __name__ == "__main__":
    sys.exit(run_recorded("env_server", main))
