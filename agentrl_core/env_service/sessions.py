"""The server's session table: ids never reused, limits (429), idle time-to-live, lost sessions.

A session is an env instance living in a worker process (see `pool.py`); this table keeps, in the
server process, which worker holds it and the last things AgentGym's GET routes report. Session
ids come from one counter shared by every env and every API, so an id is never handed out twice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from agentrl_core.env_service.pool import Worker, WorkerPool
from agentrl_core.env_service.server_metrics import StepStats
from agentrl_core.env_service.worker import EnvSpec
from agentrl_core.envs.base import StepResult
from agentrl_core.envs.errors import (SessionLostError, SessionNotFoundError, StepOutOfOrderError, TooManySessionsError,
                                     UnknownEnvError)

log = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSION_TTL_S = 600.0
RETRY_AFTER_S = 1
LOST_MEMORY = 10_000  # how many lost session ids keep answering "lost" rather than "not found"


@dataclass
class Session:
    """One live session: its worker, and its last observation, info, reward and done flag."""

    id: int
    env_name: str
    worker: Worker
    last_used: float
    busy: int = 0
    task_id: int | None = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False
    steps: int = 0
    last_step: tuple[str, StepResult] | None = None
    """The action of the step taken last since the reset, and its result: what a resend of it gets again."""
    step_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One step of a session at a time: a resend waits for the step it repeats to finish."""

    @property
    def available_actions(self) -> list[str]:
        """The admissible actions the env last reported (household and ALFWorld style names)."""
        for key in ("admissible_actions", "available_actions"):
            value = self.info.get(key)
            if isinstance(value, list):
                return [str(a) for a in value]
        return []


@dataclass(frozen=True)
class EnvHost:
    """How the server hosts one env: its spec, worker kind and session cap, and whether a dedicated worker whose
    session closed waits for the env's next session (the env class's `reuse_worker`)."""

    spec: EnvSpec
    dedicated: bool
    max_sessions: int
    reuse: bool = False


class SessionStore:
    """Live sessions over a WorkerPool, with a global cap, per-env caps and an idle TTL."""

    def __init__(
        self,
        hosts: dict[str, EnvHost],
        pool: WorkerPool,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hosts = hosts
        self.pool = pool
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.clock = clock
        self.sessions: dict[int, Session] = {}
        self.reserved: dict[str, int] = {name: 0 for name in hosts}
        self.lost: OrderedDict[int, str] = OrderedDict()
        self.stats = StepStats(clock=time.monotonic)
        self.created_total = 0
        self.closed_total = 0
        self._ids = itertools.count()
        self._last_sweep = clock()
        pool.on_lost = self._worker_lost

    def __len__(self) -> int:
        return len(self.sessions)

    def live_by_env(self) -> dict[str, int]:
        counts = {name: 0 for name in self.hosts}
        for s in self.sessions.values():
            counts[s.env_name] += 1
        return counts

    # -- create / get / remove --------------------------------------------------------------------
    def host(self, env_name: str) -> EnvHost:
        try:
            return self.hosts[env_name]
        except KeyError:
            hosted = ", ".join(sorted(self.hosts))
            raise UnknownEnvError(f"unknown environment {env_name!r}; this server hosts: {hosted}") from None

    def _reserve(self, env_name: str) -> int:
        """Take a slot for a new session of `env_name` and its id; TooManySessionsError when full."""
        host = self.host(env_name)
        total = len(self.sessions) + sum(self.reserved.values())
        if total >= self.max_sessions:
            raise TooManySessionsError(
                f"the server is at its limit of {self.max_sessions} live sessions; close finished ones "
                f"(DELETE /sessions/ID) or retry in {RETRY_AFTER_S} s"
            )
        live = self.live_by_env()[env_name] + self.reserved[env_name]
        if live >= host.max_sessions:
            raise TooManySessionsError(
                f"{env_name} is at its limit of {host.max_sessions} live sessions; close finished ones or "
                f"retry in {RETRY_AFTER_S} s"
            )
        self.reserved[env_name] += 1
        return next(self._ids)

    async def create(self, env_name: str) -> Session:
        """A new session of `env_name` (built in its worker, not reset yet)."""
        await self.sweep()
        sid = self._reserve(env_name)
        host = self.hosts[env_name]
        try:
            async with self.pool.start_slot(host.dedicated):  # a bounded number of worker processes start at once
                worker = (await self.pool.dedicated_worker(env_name if host.reuse else None) if host.dedicated
                          else self.pool.least_loaded())
                worker.sessions.add(sid)
                try:
                    await worker.call("create", sid, host.spec)
                except BaseException:
                    worker.sessions.discard(sid)
                    await self.pool.release(worker)
                    raise
        finally:
            self.reserved[env_name] -= 1
        session = Session(sid, env_name, worker, self.clock())
        self.sessions[sid] = session
        self.created_total += 1
        return session

    def get(self, sid: int, env_name: str | None = None) -> Session:
        """The live session `sid` (of `env_name` if given); SessionNotFoundError or SessionLostError."""
        session = self.sessions.get(sid)
        if session is None:
            if sid in self.lost:
                raise SessionLostError(f"session {sid} was lost: {self.lost[sid]}; start a new session")
            raise SessionNotFoundError(
                f"no session {sid}: it was never created, was closed, or expired after {self.ttl_s:g} s idle"
            )
        if env_name is not None and session.env_name != env_name:
            raise SessionNotFoundError(f"session {sid} is a {session.env_name!r} session, not {env_name!r}")
        session.last_used = self.clock()
        return session

    async def lookup(self, sid: int, env_name: str | None = None) -> Session:
        """`get`, after closing sessions whose TTL ran out (so an expired id answers "expired")."""
        await self.sweep()
        return self.get(sid, env_name)

    async def call(self, session: Session, op: str, args: Any = None) -> Any:
        """Run `op` on the session's worker, marking the session busy (so it never expires mid-call)."""
        session.busy += 1
        try:
            return await session.worker.call(op, session.id, args)
        finally:
            session.busy -= 1
            session.last_used = self.clock()

    # -- the env ops, keeping what AgentGym's GET routes report ------------------------------------
    async def reset(
        self, session: Session, task_id: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        args = {"task_id": task_id, "seed": seed, "options": options}
        obs, info = await self.call(session, "reset", args)
        session.task_id, session.observation, session.info = task_id, obs, info
        session.reward, session.done, session.steps, session.last_step = 0.0, False, 0, None
        return obs, info

    async def step(self, session: Session, action: str, number: int | None = None) -> StepResult:
        """Apply `action`; with `number` (the steps taken since the reset before this one), a resend of the step
        taken last gets its result again instead of being applied twice (`repeated_step`)."""
        async with session.step_lock:
            if number is not None and (again := repeated_step(session, action, number)) is not None:
                self.stats.steps_repeated += 1
                log.info("session %d: step %d was sent again; its result is returned again", session.id, number)
                return again
            started = time.perf_counter()
            obs, reward, terminated, truncated, info = await self.call(session, "step", action)
            self.stats.record(session.env_name, time.perf_counter() - started)
            session.observation, session.info, session.reward = obs, info, reward
            session.done = terminated or truncated
            session.steps += 1
            result = StepResult(obs, reward, terminated, truncated, info)
            session.last_step = (action, result)
            return result

    async def expert(self, session: Session) -> str:
        return str(await self.call(session, "expert"))

    async def remove(self, sid: int, env_name: str | None = None) -> None:
        """Close and forget session `sid`."""
        session = self.get(sid, env_name)
        await self._close(session)

    async def _close(self, session: Session) -> None:
        if self.sessions.pop(session.id, None) is None:
            return
        self.closed_total += 1
        worker = session.worker
        worker.sessions.discard(session.id)
        closed = False
        try:
            if worker.alive:
                await worker.call("close", session.id)
                closed = True
        except Exception:  # noqa: BLE001 - the session is gone either way
            log.exception("closing session %d (%s) failed", session.id, session.env_name)
        finally:  # a worker is reused only after a clean close (its env's own close ran)
            reuse = closed and self.hosts[session.env_name].reuse
            await self.pool.release(worker, session.env_name if reuse else None)

    # -- expiry and loss ---------------------------------------------------------------------------
    async def sweep(self, force: bool = False) -> int:
        """Close sessions idle longer than the TTL (at most every TTL/10 s, 5 s at most, unless forced)."""
        now = self.clock()
        if not force and now - self._last_sweep < min(self.ttl_s / 10, 5.0):
            return 0
        self._last_sweep = now
        expired = [s for s in self.sessions.values() if not s.busy and now - s.last_used > self.ttl_s]
        for session in expired:
            log.info("session %d (%s) expired after %.0f s idle", session.id, session.env_name, now - session.last_used)
            await self._close(session)
        return len(expired)

    def _worker_lost(self, worker: Worker) -> None:
        """A worker died: its sessions are lost (answered with SessionLostError from now on)."""
        for sid in sorted(worker.sessions):
            session = self.sessions.pop(sid, None)
            if session is None:
                continue
            self.lost[sid] = f"its worker process {worker.exit_reason}"
            while len(self.lost) > LOST_MEMORY:
                self.lost.popitem(last=False)
        worker.sessions.clear()

    async def close_all(self) -> None:
        """Close every session (server shutdown)."""
        await asyncio.gather(*(self._close(s) for s in list(self.sessions.values())), return_exceptions=True)


def repeated_step(session: Session, action: str, number: int) -> StepResult | None:
    """The result to send again when step `number` is the session's last step resent with the same action; None
    when it is the session's next step; StepOutOfOrderError for any other number."""
    if number == session.steps:
        return None
    if number == session.steps - 1 and session.last_step is not None and session.last_step[0] == action:
        return session.last_step[1]
    raise StepOutOfOrderError(
        f"step {number} of session {session.id} was sent, but the session has taken {session.steps} steps since "
        "its reset (a step may be sent again only as its last one, with the same action); reset the session")
