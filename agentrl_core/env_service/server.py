"""The environment server: ONE FastAPI app hosting every registered env over HTTP.

Env sessions live in worker processes (`pool.py`, `worker.py`): handlers are `async` and only
wait on their worker, so the event loop never blocks, a non-thread-safe engine never runs two
requests at once, and a worker that dies (crash, kill -9) fails only its own sessions — with
SessionLostError (HTTP 410) — while the server replaces it and keeps serving the rest. Sessions
have an idle TTL, ids are never reused, and full caps answer 429 with Retry-After (`sessions.py`).
Errors are real HTTP codes with an `ErrorResponse` body (see `env_api.ERROR_STATUS`). The app also
answers AgentGym's two conventions under `/{env}/` (and at the root when it hosts a single env),
`/health`, and `/metrics` (sessions per env, steps/s, latency quantiles, worker restarts, memory).

Run: `python -m agentrl_core.env_service.server --host 127.0.0.1 --port 0 --envs household`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from contextlib import asynccontextmanager
from typing import Any, Callable, Sequence

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from agentrl_core.env_service import agentgym
from agentrl_core.env_service.env_api import (
    ERROR_STATUS,
    CreateSessionRequest,
    EnvInfo,
    ErrorResponse,
    ExpertResponse,
    HealthResponse,
    MetricsResponse,
    ResetRequest,
    SessionResponse,
    StepRequest,
    StepResponse,
    TaskIdsResponse,
)
from agentrl_core.env_service.pool import WorkerPool
from agentrl_core.env_service.server_metrics import rss_mb
from agentrl_core.env_service.sessions import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_TTL_S,
    RETRY_AFTER_S,
    EnvHost,
    SessionStore,
)
from agentrl_core.env_service.worker import EnvSpec
from agentrl_core.envs import registry
from agentrl_core.envs.errors import EnvError, InvalidRequestError, UnknownEnvError
from agentrl_core.envs.extras import require_extra
from agentrl_core.errors import ServerStartError
from agentrl_core.web.app_runner import add_server_args, init_server_process, run_app
from agentrl_core.web.auth import (
    UnauthenticatedBindError,
    check_bind,
    server_token,
)
from agentrl_core.web.body_limit import MIB, BodyLimit, BodySizeLimit
from agentrl_core.web.error_bodies import ErrorKinds, install_error_handlers, respond_with_error_body

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_TTL_S", "create_app", "main", "serve"]

MAX_BODY_BYTES = 8 * MIB
"""Largest request body the env server reads by default: an action is a model's reply (at most a few hundred kB)."""
MAX_BODY_ENV = "AGENTRL_ENV_SERVER_MAX_BODY_MB"
"""Raises the env server's body limit (MiB) where no --max-body-mb is given (e.g. for the servers a run starts)."""
_RESERVED = frozenset({"envs", "sessions", "health", "metrics", "docs", "redoc", "openapi.json"})


# -- the app -------------------------------------------------------------------------------------
def _hosts(
    env_names: Sequence[str] | None, max_sessions: int, env_kwargs: dict[str, dict[str, Any]]
) -> dict[str, EnvHost]:
    """What to host: the named envs (MissingExtraError when one lacks its extra), or every
    registered env whose extras are installed."""
    names = list(env_names) if env_names else registry.available_names()
    hosts: dict[str, EnvHost] = {}
    for name in names:
        cls = registry.env_class(name)  # UnknownEnvError lists the valid names
        if name in _RESERVED:
            raise ValueError(f"env name {name!r} clashes with a server route; rename the env")
        require_extra(cls)
        cap = min(max_sessions, cls.max_sessions or max_sessions)
        spec = EnvSpec.of(cls, env_kwargs.get(name, env_kwargs.get(cls.name, {})))
        hosts[name] = EnvHost(spec, bool(cls.dedicated_worker), cap, bool(cls.dedicated_worker and cls.reuse_worker))
    return hosts


def create_app(
    env_names: Sequence[str] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    *,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    workers: int | None = None,
    body_limit: BodyLimit | None = None,
    worker_starts: int | None = None,
    idle_workers: int | None = None,
) -> FastAPI:
    """The app serving `env_names` (default: every registered env whose extras are installed).

    Sessions run in worker processes started when the app starts (its lifespan), so use the app
    through uvicorn or `with TestClient(app)`. `body_limit` defaults to MAX_BODY_BYTES (or $MAX_BODY_ENV).
    `worker_starts`: dedicated worker processes starting at once (default one per core); `idle_workers`: idle
    dedicated workers kept per env that reuses them (default the cores, at least 8; 0: none kept).
    """
    hosts = _hosts(env_names, max_sessions, env_kwargs or {})
    pool = WorkerPool(workers, worker_starts, idle_workers)
    store = SessionStore(hosts, pool, max_sessions=max_sessions, ttl_s=session_ttl_s, clock=clock)
    catalog = _Catalog(hosts, pool)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await pool.start()
        sweeper = asyncio.get_running_loop().create_task(_sweep_forever(store))
        try:
            yield
        finally:
            sweeper.cancel()
            await store.close_all()
            await pool.stop()

    app = FastAPI(title="agentrl environment server", lifespan=lifespan)
    limit = body_limit or BodyLimit.resolve(MAX_BODY_BYTES, MAX_BODY_ENV)
    app.add_middleware(BodySizeLimit, limit=limit,  # a huge POST is a 413, not gigabytes of memory
                       error_body=lambda m: ErrorResponse(error="RequestTooLargeError", detail=m).model_dump())
    app.state.store = store
    app.state.pool = pool
    _install_error_handlers(app)
    app.include_router(_native_routes(store, catalog))
    for name, host in hosts.items():
        convention = registry.env_class(name).agentgym_convention
        app.include_router(agentgym.routes(store, name, convention), prefix=f"/{name}")
    if len(hosts) == 1:
        name = next(iter(hosts))
        app.include_router(agentgym.routes(store, name, registry.env_class(name).agentgym_convention))
    return app


async def _sweep_forever(store: SessionStore) -> None:
    """Close idle sessions in the background too, not only when a request comes."""
    period = max(0.05, min(store.ttl_s / 10, 5.0))
    while True:
        await asyncio.sleep(period)
        try:
            await store.sweep()
        except Exception:  # noqa: BLE001 - keep sweeping
            log.exception("session sweep failed")


class _Catalog:
    """EnvInfo and task ids per env, asked of a worker once (building an env may be slow)."""

    def __init__(self, hosts: dict[str, EnvHost], pool: WorkerPool) -> None:
        self.hosts = hosts
        self.pool = pool
        self._described: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()

    async def describe(self, env: str) -> dict[str, Any]:
        if env not in self.hosts:
            raise UnknownEnvError(f"unknown environment {env!r}; this server hosts: {', '.join(sorted(self.hosts))}")
        async with self._lock:
            if env not in self._described:
                self._described[env] = await self.pool.least_loaded().call("describe", -1, self.hosts[env].spec)
        return self._described[env]

    async def info(self, env: str) -> EnvInfo:
        d = await self.describe(env)
        cls = registry.env_class(env)
        return EnvInfo(
            name=d["name"], action_format=d["action_format"], reward_range=d["reward_range"],
            system_prompt=d["system_prompt"], max_steps=d["max_steps"],
            split_sizes={k: len(v) for k, v in d["splits"].items()},
            version=cls.version, agentgym_convention=cls.agentgym_convention,  # type: ignore[arg-type]
        )

    async def task_ids(self, env: str, split: str) -> list[int]:
        splits = (await self.describe(env))["splits"]
        if split not in splits:
            raise InvalidRequestError(f"{env} has no split {split!r}; its splits are {', '.join(splits)}")
        return list(splits[split])


def _metrics(store: SessionStore, pool: WorkerPool) -> MetricsResponse:
    worker_rss = [rss_mb(pid) for pid in pool.pids()]
    known = [r for r in worker_rss if r is not None]
    return MetricsResponse(
        sessions=store.live_by_env(), sessions_total=len(store), sessions_created=store.created_total,
        sessions_closed=store.closed_total, sessions_lost=len(store.lost), steps_total=store.stats.steps_total,
        steps_by_env=dict(store.stats.steps_by_env), steps_repeated=store.stats.steps_repeated,
        steps_per_s=round(store.stats.steps_per_s(), 3),
        step_latency_ms=store.stats.latency_ms(), workers_shared=len(pool.shared),
        workers_dedicated=len(pool.dedicated), workers_idle=sum(len(w) for w in pool.idle.values()),
        sessions_on_reused_workers=pool.reused, worker_restarts=pool.restarts, worker_deaths=pool.deaths,
        server_rss_mb=rss_mb(), workers_rss_mb=round(sum(known), 1) if known else None,
    )


def _native_routes(store: SessionStore, catalog: _Catalog) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> HealthResponse:
        return HealthResponse(envs=sorted(store.hosts), sessions=len(store))

    @router.get("/metrics")
    async def metrics() -> MetricsResponse:
        return _metrics(store, store.pool)

    @router.get("/envs")
    async def envs() -> list[EnvInfo]:
        return [await catalog.info(n) for n in sorted(store.hosts)]

    @router.get("/envs/{env}")
    async def env_info(env: str) -> EnvInfo:
        return await catalog.info(env)

    @router.get("/envs/{env}/tasks")
    async def tasks(env: str, split: str = "train") -> TaskIdsResponse:
        return TaskIdsResponse(task_ids=await catalog.task_ids(env, split))

    @router.post("/sessions")
    async def create_session(body: CreateSessionRequest) -> SessionResponse:
        session = await store.create(body.env)
        try:
            obs, info = await store.reset(session, body.task_id, body.seed, body.options)
        except BaseException:
            await store.remove(session.id)  # a session whose first reset failed would only leak
            raise
        return SessionResponse(session_id=session.id, observation=obs, info=info)

    @router.post("/sessions/{sid}/reset")
    async def reset_session(sid: int, body: ResetRequest) -> SessionResponse:
        obs, info = await store.reset(await store.lookup(sid), body.task_id, body.seed, body.options)
        return SessionResponse(session_id=sid, observation=obs, info=info)

    @router.post("/sessions/{sid}/step")
    async def step_session(sid: int, body: StepRequest) -> StepResponse:
        r = await store.step(await store.lookup(sid), body.action, body.step)
        return StepResponse(
            observation=r.observation, reward=r.reward, terminated=r.terminated, truncated=r.truncated, info=r.info
        )

    @router.get("/sessions/{sid}/expert")
    async def expert(sid: int) -> ExpertResponse:
        return ExpertResponse(action=await store.expert(await store.lookup(sid)))

    @router.delete("/sessions/{sid}", status_code=204, response_class=Response)
    async def delete_session(sid: int) -> Response:
        await store.remove(sid)
        return Response(status_code=204)

    return router


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure becomes a real status code with an ErrorResponse body (never 200): an env error by its
    class (`env_api.ERROR_STATUS`; 429 with Retry-After), then web.error_bodies' generic kinds."""

    async def env_error(_: Request, exc: Exception) -> JSONResponse:
        name = type(exc).__name__
        status = ERROR_STATUS.get(name, 500)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
        return respond_with_error_body(status, name if name in ERROR_STATUS else "EnvServerError", str(exc), headers)

    kinds = ErrorKinds(invalid="InvalidRequestError", unexpected="EnvServerError",
                       http={404: "NotFound", 413: "RequestTooLargeError"})
    install_error_handlers(app, respond_with_error_body, kinds, log=log, own=[(EnvError, env_error)])


# -- the entry point -----------------------------------------------------------------------------
def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = add_server_args(argparse.ArgumentParser(
        prog="python -m agentrl_core.env_service.server", description="Serve agentrl environments over HTTP."
    ))
    p.add_argument("--envs", default="", help="comma-separated env names (default: all registered)")
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="most live sessions (then HTTP 429)")
    p.add_argument(
        "--session-ttl", type=float, default=DEFAULT_SESSION_TTL_S, help="seconds before an idle session is closed"
    )
    p.add_argument(
        "--workers", type=int, default=None, help="shared env worker processes (default: one per core, at most 8)"
    )
    p.add_argument(
        "--worker-starts", type=int, default=None,
        help="per-session worker processes (ALFWorld, ScienceWorld) starting at once (default: one per core)",
    )
    p.add_argument(
        "--env-kwargs", default="{}", help='JSON: constructor kwargs per env, e.g. {"household": {"max_steps": 16}}'
    )
    return p.parse_args(argv)


def serve(
    env_names: Sequence[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = 0,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    log_level: str = "warning",
    port_file: str | None = None,
    workers: int | None = None,
    allow_unauthenticated: bool = False,
    max_body_mb: float | None = None,
    worker_starts: int | None = None,
) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (sessions are closed on the way out).

    Binds 127.0.0.1 by default; port 0 or None picks a free one (announced on stderr, and
    written to `port_file` if given). With AGENTRL_SERVER_TOKEN set every route but /health needs
    it; without, it is open on loopback and refused beyond unless `allow_unauthenticated`
    (web/auth.py). Bodies over `max_body_mb` (default 8 MiB, or $AGENTRL_ENV_SERVER_MAX_BODY_MB)
    get 413. Raises UnknownEnvError / ServerStartError / UnauthenticatedBindError / ValueError before serving.
    """
    check_bind(host, server_token(), allow_unauthenticated=allow_unauthenticated, what="env server")
    limit = BodyLimit.resolve(MAX_BODY_BYTES, MAX_BODY_ENV, max_body_mb)
    app = create_app(env_names, max_sessions, session_ttl_s=session_ttl_s, env_kwargs=env_kwargs, workers=workers,
                     body_limit=limit, worker_starts=worker_starts)
    run_app(app, host, port, log_level=log_level, port_file=port_file, banner="agentrl env server on http://{}",
            allow_unauthenticated=allow_unauthenticated)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: parse, then `serve`; a bad env name or a taken port exits with code 2."""
    args = _parse_args(argv)
    init_server_process(args)
    try:
        serve(
            [n.strip() for n in args.envs.split(",") if n.strip()] or None, args.host, args.port,
            max_sessions=args.max_sessions, session_ttl_s=args.session_ttl,
            env_kwargs=json.loads(args.env_kwargs), log_level=args.log_level, port_file=args.port_file,
            workers=args.workers, allow_unauthenticated=args.allow_unauthenticated, max_body_mb=args.max_body_mb,
            worker_starts=args.worker_starts,
        )
    except (EnvError, ServerStartError, ValueError, UnauthenticatedBindError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
