"""The server's side of its worker processes: start them, send requests, notice deaths, replace.

Everything here runs on the server's asyncio loop and never blocks it: requests are written and
replies read through asyncio streams over a socket pair (`frames.py`), one reader task per
worker; a death is noticed as end-of-file on that socket (the kernel closes it when the process
dies, kill -9 included); starting and reaping a process run in the default executor. Workers are
fresh interpreters (`python -m agentrl_core.env_service.worker`), never forks of the server, so they inherit
none of its threads or locks.

Two kinds of worker:
- shared: a fixed pool (default one per core) hosting sessions of light envs; a new session goes
  to the worker with the fewest sessions; a shared worker that dies is replaced at once;
- dedicated: one process per session, for envs whose class sets `dedicated_worker = True`
  (ALFWorld, ScienceWorld); it stops when its session closes. At most `start_limit` of them start
  at once (default one per core): a burst of new sessions queues for a start slot, first come first
  served, instead of starting dozens of interpreters that share the cores and all finish late.
  An env whose class also sets `reuse_worker = True` (ALFWorld) keeps a worker whose session closed
  cleanly as an idle one for the next session of that env, still one session at a time: a new
  interpreter importing the engine costs seconds of CPU per session (an episode, in a rollout), a warm
  one nothing. At most `keep_idle` wait per env, each for IDLE_WORKER_S, each serving at most
  WORKER_SESSIONS sessions (so a slow leak in an engine is bounded), then they stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
from typing import Any, Callable

from agentrl_core.env_service import frames
from agentrl_core.envs.errors import EnvServerError, EnvTimeoutError, SessionLostError
from agentrl_core.errors import MissingExtraError, ResetNeededError, TaskNotFoundError

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_S = 300.0
IDLE_WORKER_S = 60.0
"""Seconds an idle dedicated worker waits for the next session of its env before it stops."""
WORKER_SESSIONS = 64
"""Sessions one reused dedicated worker serves at most (one at a time) before it stops."""
_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (ResetNeededError, TaskNotFoundError, MissingExtraError, EnvServerError)
}
_req_ids = itertools.count()


def _child_env() -> dict[str, str]:
    """The worker's environment: ours, with our import path (a checkout, test modules) on PYTHONPATH."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


class Worker:
    """One worker process and the requests in flight to it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, dedicated: bool, label: str) -> None:
        self.loop = loop
        self.dedicated = dedicated
        self.label = label
        self.sessions: set[int] = set()
        self.served = 0  # sessions this worker has closed (a reused dedicated worker serves several, in turn)
        self.idle_since: float | None = None  # when it went idle, waiting for its env's next session
        self.pending: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self.alive = False
        self.stopping = False  # a stop we asked for is not a death
        self.exit_reason = ""
        self.on_death: Callable[["Worker"], None] = lambda _: None
        self.process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process (blocking for ~0.2 s: call it through the executor)."""
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agentrl_core.env_service.worker", "--fd", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=_child_env(),
            )
        finally:
            theirs.close()
        self._sock = ours

    async def watch(self) -> None:
        """Open the streams and start the reader task, which is also how a death is noticed."""
        assert self._sock is not None
        reader, self._writer = await asyncio.open_connection(sock=self._sock)
        self.alive = True
        self._reader_task = self.loop.create_task(self._read_replies(reader))

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def exitcode(self) -> int | None:
        return self.process.poll() if self.process else None

    def kill(self) -> None:
        """SIGKILL the process (its death is then handled like any other)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the worker to close its sessions and exit; kill it if it does not in time."""
        self.stopping = True
        if self.alive and self._writer is not None:
            try:
                self._writer.write(frames.encode((next(_req_ids), "stop", -1, None)))
            except (OSError, RuntimeError):
                pass
        deadline = self.loop.time() + timeout_s
        while self.exitcode is None and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.exitcode is None:
            self.kill()
            await self.loop.run_in_executor(None, self.process.wait)  # type: ignore[union-attr]
        self._forget(f"stopped (exit code {self.exitcode})")

    # -- requests -------------------------------------------------------------------------------
    async def call(self, op: str, sid: int, args: Any = None, timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S) -> Any:
        """Run `op` on the worker and return its payload; typed errors as the env raised them."""
        if not self.alive:
            raise SessionLostError(f"session {sid} was lost: its worker process {self.exit_reason or 'is gone'}")
        req_id = next(_req_ids)
        future: asyncio.Future[tuple[bool, Any]] = self.loop.create_future()
        self.pending[req_id] = future
        try:
            assert self._writer is not None
            self._writer.write(frames.encode((req_id, op, sid, args)))
            ok, payload = await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            self.kill()  # a hung engine: free its CPU and memory; its sessions are lost
            raise EnvTimeoutError(
                f"{op} on session {sid} took longer than {timeout_s:g} s; its worker was stopped and the "
                "session is lost (raise the server's --call-timeout for slow envs)"
            ) from None
        except (OSError, RuntimeError):  # the transport is closing: the worker is gone
            raise SessionLostError(f"session {sid} was lost: its worker process {self.exit_reason or 'is gone'}") from None
        finally:
            self.pending.pop(req_id, None)
        if ok:
            return payload
        name, message = payload
        raise _ERRORS.get(name, EnvServerError)(message)

    # -- events ---------------------------------------------------------------------------------
    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        """Resolve each reply's future; at end of stream (the worker died or stopped) handle the exit."""
        try:
            while True:
                req_id, ok, payload = await frames.read(reader)
                future = self.pending.get(req_id)
                if future is not None and not future.done():
                    future.set_result((ok, payload))
        except (asyncio.IncompleteReadError, OSError):
            pass
        await self._on_exit()

    async def _on_exit(self) -> None:
        if not self.alive:
            return
        code = await self.loop.run_in_executor(None, self._reap)
        reason = f"died (exit code {code})" if code is not None else "closed its pipe"
        if self.stopping:
            self._forget(f"stopped (exit code {code})")
            return
        log.warning("env worker %s (pid %s) %s; its %d session(s) are lost", self.label, self.pid, reason, len(self.sessions))
        self._forget(reason)
        self.on_death(self)

    def _reap(self) -> int | None:
        """The exit code of a process whose socket closed (it is dead or dying: wait briefly)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.process.kill()  # it closed its socket but lives on: it is of no use any more
            return None

    def _forget(self, reason: str) -> None:
        """Stop watching; fail every request in flight with SessionLostError."""
        self.alive = False
        self.exit_reason = reason
        for future in self.pending.values():
            if not future.done():
                future.set_exception(SessionLostError(f"the session's worker process {reason}; start a new session"))
        self.pending.clear()
        if self._writer is not None:
            self._writer.close()


class WorkerPool:
    """The shared workers and the dedicated ones, with restart counts for the metrics route."""

    def __init__(self, shared_workers: int | None = None, start_limit: int | None = None,
                 keep_idle: int | None = None) -> None:
        self.size = max(1, shared_workers or min(8, os.cpu_count() or 1))
        if start_limit is not None and start_limit < 1:
            raise ValueError(f"start_limit must be >= 1 (dedicated workers starting at once), got {start_limit}")
        if keep_idle is not None and keep_idle < 0:
            raise ValueError(f"keep_idle must be >= 0 (idle dedicated workers kept per env), got {keep_idle}")
        self.keep_idle = max(8, os.cpu_count() or 1) if keep_idle is None else keep_idle
        self.idle: dict[str, list[Worker]] = {}  # per env, dedicated workers waiting for its next session
        self.reused = 0  # sessions given an idle worker instead of a new process
        self._starts = asyncio.Semaphore(start_limit or os.cpu_count() or 1)  # binds to the loop at first use
        self.shared: list[Worker] = []
        self.dedicated: set[Worker] = set()
        self.restarts = 0  # shared workers replaced after dying
        self.deaths = 0  # any worker that died unasked
        self.on_lost: Callable[[Worker], None] = lambda _: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._labels = itertools.count()
        self._closing = False

    async def start(self) -> None:
        """Start the shared workers (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        self.shared = list(await asyncio.gather(*(self._spawn(dedicated=False) for _ in range(self.size))))

    @property
    def started(self) -> bool:
        return self._loop is not None

    async def _spawn(self, *, dedicated: bool) -> Worker:
        assert self._loop is not None, "WorkerPool.start() was not awaited"
        label = f"{'d' if dedicated else 's'}{next(self._labels)}"
        worker = Worker(self._loop, dedicated=dedicated, label=label)
        await self._loop.run_in_executor(None, worker.start)
        worker.on_death = self._died
        await worker.watch()
        return worker

    def least_loaded(self) -> Worker:
        """The live shared worker with the fewest sessions."""
        live = [w for w in self.shared if w.alive]
        if not live:
            raise SessionLostError("no live env worker right now (one is being replaced); retry in a moment")
        return min(live, key=lambda w: len(w.sessions))

    def start_slot(self, dedicated: bool) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held while a session's dedicated worker starts and builds its env (nothing for a shared worker)."""
        return self._starts if dedicated else contextlib.nullcontext()

    async def dedicated_worker(self, env: str | None = None) -> Worker:
        """A process for one session: an idle worker kept for `env` when there is one, else a new process."""
        await self._stop_stale_idle()  # what is left waiting is alive and within its wait
        waiting = self.idle.get(env) if env is not None else None
        if waiting:
            worker = waiting.pop()
            worker.idle_since = None
            self.reused += 1
            return worker
        worker = await self._spawn(dedicated=True)
        self.dedicated.add(worker)
        return worker

    async def release(self, worker: Worker, keep_for: str | None = None) -> None:
        """A dedicated worker's session closed: keep it idle for the next session of `keep_for` (the session
        closed cleanly and the env reuses workers) while under the limits above, else stop it."""
        if not worker.dedicated:
            return
        worker.served += 1
        waiting = self.idle.setdefault(keep_for, []) if keep_for is not None else None
        if (waiting is not None and worker.alive and not worker.sessions and not self._closing
                and worker.served < WORKER_SESSIONS and len(waiting) < self.keep_idle):
            assert self._loop is not None
            worker.idle_since = self._loop.time()
            waiting.append(worker)
            self._loop.call_later(IDLE_WORKER_S + 1.0, lambda: self._loop.create_task(self._stop_stale_idle()))
            return
        self.dedicated.discard(worker)
        await worker.stop()

    async def _stop_stale_idle(self) -> None:
        """Stop the idle workers that waited IDLE_WORKER_S for a session (and forget dead ones)."""
        if self._loop is None:
            return
        now, stale = self._loop.time(), []
        for env, waiting in self.idle.items():
            keep = [w for w in waiting if w.alive and w.idle_since is not None and now - w.idle_since < IDLE_WORKER_S]
            stale += [w for w in waiting if w not in keep]
            self.idle[env] = keep
        for worker in stale:
            self.dedicated.discard(worker)
        await asyncio.gather(*(w.stop() for w in stale if w.alive), return_exceptions=True)

    def _died(self, worker: Worker) -> None:
        if self._closing:
            return
        self.deaths += 1
        self.on_lost(worker)
        if worker.dedicated:
            self.dedicated.discard(worker)
            for waiting in self.idle.values():
                if worker in waiting:
                    waiting.remove(worker)
            return
        assert self._loop is not None
        self._loop.create_task(self._replace(worker))

    async def _replace(self, dead: Worker) -> None:
        replacement = await self._spawn(dedicated=False)
        if self._closing:
            await replacement.stop()
            return
        self.shared = [replacement if w is dead else w for w in self.shared]
        self.restarts += 1
        log.warning("env worker %s replaced by %s (pid %s)", dead.label, replacement.label, replacement.pid)

    async def stop(self) -> None:
        """Stop every worker (they close their sessions first)."""
        self._closing = True
        workers = [*self.shared, *self.dedicated]
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        self.shared, self.dedicated, self.idle = [], set(), {}

    def pids(self) -> list[int]:
        return [w.pid for w in (*self.shared, *self.dedicated) if w.alive and w.pid is not None]
