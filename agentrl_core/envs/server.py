"""The environment server: ONE FastAPI app hosting every registered env over HTTP, and its launcher.

Sessions hold one env instance each. Env calls block, so handlers are plain `def` (FastAPI runs
them in its thread pool) and a per-session lock keeps one session from being stepped twice at
once. Errors are real HTTP codes with an `ErrorResponse` body (see `wire.ERROR_STATUS`). The app
also answers AgentGym's routes under `/{env}/` (and at the root when it hosts a single env).

Run: `python -m agentrl_core.envs.server --host 127.0.0.1 --port 0 --envs household`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentrl_core.envs import registry
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.errors import (
    EnvError,
    EnvServerError,
    ResetNeededError,
    ServerStartError,
    SessionNotFoundError,
    TaskNotFoundError,
    TooManySessionsError,
    UnknownEnvError,
)
from agentrl_core.envs.wire import (
    ERROR_STATUS,
    AgentGymCloseRequest,
    AgentGymCloseResponse,
    AgentGymCreateResponse,
    AgentGymResetRequest,
    AgentGymResetResponse,
    AgentGymStepRequest,
    AgentGymStepResponse,
    CreateSessionRequest,
    EnvInfo,
    ErrorResponse,
    ExpertResponse,
    HealthResponse,
    ResetRequest,
    SessionResponse,
    StepRequest,
    StepResponse,
    TaskIdsResponse,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSION_TTL_S = 600.0
RETRY_AFTER_S = 1
_RESERVED = frozenset({"envs", "sessions", "health", "docs", "redoc", "openapi.json"})
_PASS_THROUGH = (ResetNeededError, TaskNotFoundError, UnknownEnvError, SessionNotFoundError)


# -- sessions ------------------------------------------------------------------------------------
@dataclass
class Session:
    """One env instance behind an id, with the last things AgentGym's GET routes report."""

    id: int
    env_name: str
    env: Env
    clock: Callable[[], float]
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    task_id: int | None = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False
    steps: int = 0

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold the session lock; turn unexpected env exceptions into EnvServerError (HTTP 500)."""
        with self.lock:
            if self.closed:
                raise SessionNotFoundError(f"session {self.id} was closed")
            self.last_used = self.clock()
            try:
                yield
            except _PASS_THROUGH:
                raise
            except Exception as exc:  # noqa: BLE001 - the boundary: report the type, keep serving
                log.exception("env %s (session %d) raised", self.env_name, self.id)
                raise EnvServerError(f"{self.env_name} raised {type(exc).__name__}: {exc}") from exc

    def reset(self, task_id: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        with self._guard():
            obs, info = self.env.reset(task_id=task_id, seed=seed, options=options)
            self.task_id, self.observation, self.info = task_id, obs, info
            self.reward, self.done, self.steps = 0.0, False, 0
            return obs, info

    def step(self, action: str) -> StepResult:
        with self._guard():
            result = self.env.step(action)
            self.observation, self.info, self.reward = result.observation, result.info, result.reward
            self.done = result.terminated or result.truncated
            self.steps += 1
            return result

    def expert(self) -> str:
        with self._guard():
            return self.env.expert_action()

    def close(self) -> None:
        """Close the env once (waits for a running call to finish)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.env.close()
            except Exception:  # noqa: BLE001 - closing must not fail the request or the shutdown
                log.exception("closing env %s (session %d) failed", self.env_name, self.id)


class SessionStore:
    """Live sessions: ids from a monotonic counter (never reused), a size cap, an idle TTL."""

    def __init__(
        self,
        factories: dict[str, Callable[[], Env]],
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factories = factories
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._reserved = 0  # slots taken by sessions whose env is being built
        self._ids = itertools.count()
        self._last_sweep = clock()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, env_name: str) -> Session:
        """A new session of `env_name` (not reset yet). TooManySessionsError when full."""
        factory = self.factories.get(env_name)
        if factory is None:
            hosted = ", ".join(sorted(self.factories))
            raise UnknownEnvError(f"unknown environment {env_name!r}; this server hosts: {hosted}")
        self.sweep()
        with self._lock:
            if len(self._sessions) + self._reserved >= self.max_sessions:
                raise TooManySessionsError(
                    f"the server is at its limit of {self.max_sessions} live sessions; close finished ones "
                    f"(DELETE /sessions/ID) or retry in {RETRY_AFTER_S} s"
                )
            self._reserved += 1
            sid = next(self._ids)
        try:
            env = factory()  # built outside the store lock: some envs are slow to construct
        finally:
            with self._lock:
                self._reserved -= 1
        session = Session(sid, env_name, env, self.clock, self.clock())
        with self._lock:
            self._sessions[sid] = session
        return session

    def get(self, sid: int, env_name: str | None = None) -> Session:
        """The live session `sid` (of `env_name` if given); SessionNotFoundError otherwise."""
        self.sweep()
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            raise SessionNotFoundError(
                f"no session {sid}: it was never created, was closed, or expired after {self.ttl_s:g} s idle"
            )
        if env_name is not None and session.env_name != env_name:
            raise SessionNotFoundError(f"session {sid} is a {session.env_name!r} session, not {env_name!r}")
        session.last_used = self.clock()
        return session

    def remove(self, sid: int, env_name: str | None = None) -> None:
        """Close and forget session `sid`."""
        session = self.get(sid, env_name)
        with self._lock:
            self._sessions.pop(sid, None)
        session.close()

    def sweep(self, force: bool = False) -> int:
        """Close sessions idle longer than the TTL (at most every TTL/10 s unless forced)."""
        now = self.clock()
        if not force and now - self._last_sweep < min(self.ttl_s / 10, 5.0):
            return 0
        self._last_sweep = now
        with self._lock:
            expired = [
                s for s in self._sessions.values() if now - s.last_used > self.ttl_s and not s.lock.locked()
            ]
            for session in expired:
                del self._sessions[session.id]
        for session in expired:
            log.info("session %d (%s) expired after %.0f s idle", session.id, session.env_name, now - session.last_used)
            session.close()
        return len(expired)

    def close_all(self) -> None:
        """Close every session (server shutdown)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()


# -- the app -------------------------------------------------------------------------------------
def create_app(
    env_names: Sequence[str] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    *,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The app serving `env_names` (default: every registered env)."""
    names = list(env_names) if env_names else registry.names()
    for name in names:
        registry.env_class(name)  # UnknownEnvError lists the valid names
        if name in _RESERVED:
            raise ValueError(f"env name {name!r} clashes with a server route; rename the env")
    env_kwargs = env_kwargs or {}
    factories = {n: partial(registry.make, n, **env_kwargs.get(n, {})) for n in names}
    store = SessionStore(factories, max_sessions=max_sessions, ttl_s=session_ttl_s, clock=clock)
    catalog = _Catalog({n: factories[n]() for n in names})

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        yield
        store.close_all()
        catalog.close()

    app = FastAPI(title="agentrl environment server", lifespan=lifespan)
    app.state.store = store
    _install_error_handlers(app)
    app.include_router(_native_routes(store, catalog))
    for name in names:
        app.include_router(_agentgym_routes(store, name), prefix=f"/{name}")
    if len(names) == 1:
        app.include_router(_agentgym_routes(store, names[0]))
    return app


class _Catalog:
    """One idle instance per env, for its EnvInfo and task ids (computed once)."""

    def __init__(self, prototypes: dict[str, Env]) -> None:
        self.prototypes = prototypes
        self.infos = {n: _env_info(e) for n, e in prototypes.items()}
        self._tasks: dict[tuple[str, str], list[int]] = {}

    def info(self, env: str) -> EnvInfo:
        if env not in self.infos:
            raise UnknownEnvError(f"unknown environment {env!r}; this server hosts: {', '.join(sorted(self.infos))}")
        return self.infos[env]

    def task_ids(self, env: str, split: str) -> list[int]:
        self.info(env)
        key = (env, split)
        if key not in self._tasks:
            self._tasks[key] = list(self.prototypes[env].task_ids(split))
        return self._tasks[key]

    def close(self) -> None:
        for env in self.prototypes.values():
            env.close()


def _env_info(env: Env) -> EnvInfo:
    return EnvInfo(
        name=env.name,
        action_format=env.action_format,
        reward_range=env.reward_range,
        system_prompt=env.system_prompt,
        max_steps=env.max_steps,
        split_sizes={split: len(env.task_ids(split)) for split in ("train", "test")},
    )


def _native_routes(store: SessionStore, catalog: _Catalog) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    def health() -> HealthResponse:
        return HealthResponse(envs=sorted(catalog.infos), sessions=len(store))

    @router.get("/envs")
    def envs() -> list[EnvInfo]:
        return [catalog.infos[n] for n in sorted(catalog.infos)]

    @router.get("/envs/{env}")
    def env_info(env: str) -> EnvInfo:
        return catalog.info(env)

    @router.get("/envs/{env}/tasks")
    def tasks(env: str, split: Literal["train", "test"] = "train") -> TaskIdsResponse:
        return TaskIdsResponse(task_ids=catalog.task_ids(env, split))

    @router.post("/sessions")
    def create_session(body: CreateSessionRequest) -> SessionResponse:
        session = store.create(body.env)
        try:
            obs, info = session.reset(body.task_id, body.seed, body.options)
        except Exception:
            store.remove(session.id)  # a session whose first reset failed would only leak
            raise
        return SessionResponse(session_id=session.id, observation=obs, info=info)

    @router.post("/sessions/{sid}/reset")
    def reset_session(sid: int, body: ResetRequest) -> SessionResponse:
        obs, info = store.get(sid).reset(body.task_id, body.seed, body.options)
        return SessionResponse(session_id=sid, observation=obs, info=info)

    @router.post("/sessions/{sid}/step")
    def step_session(sid: int, body: StepRequest) -> StepResponse:
        r = store.get(sid).step(body.action)
        return StepResponse(
            observation=r.observation, reward=r.reward, terminated=r.terminated, truncated=r.truncated, info=r.info
        )

    @router.get("/sessions/{sid}/expert")
    def expert(sid: int) -> ExpertResponse:
        return ExpertResponse(action=store.get(sid).expert())

    @router.delete("/sessions/{sid}", status_code=204, response_class=Response)
    def delete_session(sid: int) -> Response:
        store.remove(sid)
        return Response(status_code=204)

    return router


def _agentgym_routes(store: SessionStore, env_name: str) -> APIRouter:
    """AgentGym convention A for one env; ids are the same session ids as the native API."""
    router = APIRouter(tags=[f"agentgym/{env_name}"])

    def actions(session: Session) -> list[str]:
        return list(session.info.get("admissible_actions", []))

    @router.post("/create")
    def create() -> AgentGymCreateResponse:
        return AgentGymCreateResponse(id=store.create(env_name).id)

    @router.post("/reset")
    def reset(body: AgentGymResetRequest) -> AgentGymResetResponse:
        session = store.get(body.id, env_name)
        obs, _ = session.reset(body.task_id, None, None)
        return AgentGymResetResponse(id=body.id, observation=obs, available_actions=actions(session))

    @router.post("/step")
    def step(body: AgentGymStepRequest) -> AgentGymStepResponse:
        session = store.get(body.id, env_name)
        r = session.step(body.action)
        return AgentGymStepResponse(
            observation=r.observation, reward=r.reward, done=r.terminated or r.truncated,
            available_actions=actions(session), info=r.info,
        )

    @router.get("/observation")
    def observation(id: int) -> str:  # noqa: A002 - AgentGym's parameter name
        return store.get(id, env_name).observation

    @router.get("/available_actions")
    def available_actions(id: int) -> list[str]:  # noqa: A002
        return actions(store.get(id, env_name))

    @router.get("/detail")
    def detail(id: int) -> dict[str, Any]:  # noqa: A002
        s = store.get(id, env_name)
        return {
            "id": s.id, "env": s.env_name, "task_id": s.task_id, "observation": s.observation,
            "available_actions": actions(s), "reward": s.reward, "done": s.done, "steps": s.steps, "info": s.info,
        }

    @router.post("/close")
    def close(body: AgentGymCloseRequest) -> AgentGymCloseResponse:
        store.remove(body.id, env_name)
        return AgentGymCloseResponse(id=body.id)

    return router


def _error(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ErrorResponse(error=error, detail=detail).model_dump(), status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure becomes a real status code with an ErrorResponse body (never 200)."""

    async def env_error(_: Request, exc: Exception) -> JSONResponse:
        name = type(exc).__name__
        status = ERROR_STATUS.get(name, 500)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
        return _error(status, name if name in ERROR_STATUS else "EnvServerError", str(exc), headers)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()]
        return _error(422, "InvalidRequestError", "; ".join(parts) or "invalid request")

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error = "NotFound" if exc.status_code == 404 else "HTTPError"
        return _error(exc.status_code, error, str(exc.detail), getattr(exc, "headers", None))

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected server error")
        return _error(500, "EnvServerError", f"{type(exc).__name__}: {exc}")

    app.add_exception_handler(EnvError, env_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


# -- the entry point -----------------------------------------------------------------------------
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on (host, port); port 0 picks a free one. Clear error if taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every response waits ~40 ms for a delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServerStartError(
                f"port {port} on {host} is already in use; pick another --port, or 0 for a free one"
            ) from None
        raise ServerStartError(f"cannot bind {host}:{port}: {exc}") from None
    return sock


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agentrl_core.envs.server", description="Serve agentrl environments over HTTP."
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    p.add_argument("--envs", default="", help="comma-separated env names (default: all registered)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="most live sessions (then HTTP 429)")
    p.add_argument(
        "--session-ttl", type=float, default=DEFAULT_SESSION_TTL_S, help="seconds before an idle session is closed"
    )
    p.add_argument(
        "--env-kwargs", default="{}", help='JSON: constructor kwargs per env, e.g. {"household": {"max_steps": 16}}'
    )
    p.add_argument("--port-file", default=None, help=argparse.SUPPRESS)  # launch_server learns the port here
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)  # exit when it dies
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
) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (sessions are closed on the way out).

    Binds 127.0.0.1 by default; port 0 or None picks a free one (announced on stderr, and
    written to `port_file` if given). Raises UnknownEnvError / ServerStartError before serving.
    """
    import uvicorn

    app = create_app(env_names, max_sessions, session_ttl_s=session_ttl_s, env_kwargs=env_kwargs)
    sock = bind_socket(host, port or 0)
    bound = sock.getsockname()[1]
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(bound))
        tmp.replace(port_file)  # atomic: the launcher never reads half a number
    print(f"agentrl env server on http://{host}:{bound}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=host, port=bound, log_level=log_level, access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _exit_with_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """Stop this server (gracefully, SIGTERM) when the process that launched it is gone.

    A flow run killed hard (SIGKILL, a cancelled deployment) never reaches its `finally`; the
    server notices it was re-parented and shuts itself down instead of leaking.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: parse, then `serve`; a bad env name or a taken port exits with code 2."""
    args = _parse_args(argv)
    if args.parent_pid:
        _exit_with_parent(args.parent_pid)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(
            [n.strip() for n in args.envs.split(",") if n.strip()] or None, args.host, args.port,
            max_sessions=args.max_sessions, session_ttl_s=args.session_ttl,
            env_kwargs=json.loads(args.env_kwargs), log_level=args.log_level, port_file=args.port_file,
        )
    except (EnvError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
