"""Environment worker processes: env sessions run here, one request at a time, off the server's loop.

Engines that block or are not thread-safe (ALFWorld's TextWorld, ScienceWorld's JVM bridge) are
safe because a worker never runs two requests at once. A worker that dies takes only its own
sessions with it; the server (see `pool.py`) notices through the process sentinel.

Protocol over one socket pair, as length-prefixed pickle frames (`frames.py`):

    request  = (req_id, op, sid, args)
    response = (req_id, True, payload)  or  (req_id, False, (error_type_name, message))

Ops: "create" (args: EnvSpec), "reset" (task_id, seed, options), "step" (action), "expert",
"close", "describe" (args: EnvSpec; builds a throw-away instance), "stop" (no response).

Started by the server as `python -m agentrl_core.env_service.worker --fd N`, N being its end of a
socket pair (a fresh interpreter: nothing of the server's threads or state is inherited).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import queue
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from agentrl_core.env_service import frames
from agentrl_core.envs.base import Env
from agentrl_core.errors import MissingExtraError, ResetNeededError, TaskNotFoundError

log = logging.getLogger(__name__)

_PASS_THROUGH = (ResetNeededError, TaskNotFoundError, MissingExtraError)


@dataclass(frozen=True)
class EnvSpec:
    """How a worker builds an env: the class by module and qualified name, plus constructor kwargs.

    Specs come from the server's own registry (never from a request), so a worker imports only
    modules the server already chose to host.
    """

    name: str
    module: str
    qualname: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, env_cls: type[Env], kwargs: dict[str, Any] | None = None) -> "EnvSpec":
        return cls(env_cls.name, env_cls.__module__, env_cls.__qualname__, dict(kwargs or {}))

    def build(self) -> Env:
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj(**self.kwargs)


def describe(env: Env) -> dict[str, Any]:
    """What the server's catalog needs: the EnvInfo fields and every split's task ids."""
    splits = {name: [int(t) for t in env.task_ids(name)] for name in env.splits}
    return {
        "name": env.name,
        "action_format": env.action_format,
        "reward_range": tuple(env.reward_range),
        "system_prompt": env.system_prompt,
        "max_steps": int(env.max_steps),
        "splits": splits,
    }


class _Sessions:
    """The env instances of one worker, by session id, and the ops on them."""

    def __init__(self) -> None:
        self.envs: dict[int, Env] = {}

    def env(self, sid: int) -> Env:
        try:
            return self.envs[sid]
        except KeyError:
            raise LookupError(f"worker has no session {sid}") from None

    def create(self, sid: int, spec: EnvSpec) -> None:
        self.envs[sid] = spec.build()

    def reset(self, sid: int, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self.env(sid).reset(task_id=args["task_id"], seed=args.get("seed"), options=args.get("options"))

    def step(self, sid: int, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        r = self.env(sid).step(action)
        return r.observation, float(r.reward), bool(r.terminated), bool(r.truncated), r.info

    def expert(self, sid: int, _: Any) -> str:
        return self.env(sid).expert_action()

    def close(self, sid: int, _: Any = None) -> None:
        env = self.envs.pop(sid, None)
        if env is not None:
            env.close()

    def describe(self, _: int, spec: EnvSpec) -> dict[str, Any]:
        env = spec.build()
        try:
            return describe(env)
        finally:
            env.close()

    def close_all(self) -> None:
        for sid in list(self.envs):
            try:
                self.close(sid)
            except Exception:  # noqa: BLE001 - shutting down: close the rest
                log.exception("closing session %d failed", sid)

    def handler(self, op: str) -> Callable[[int, Any], Any]:
        handlers: dict[str, Callable[[int, Any], Any]] = {
            "create": self.create, "reset": self.reset, "step": self.step, "expert": self.expert,
            "close": self.close, "describe": self.describe,
        }
        if op not in handlers:
            raise ValueError(f"unknown worker op {op!r}")
        return handlers[op]


def _error(exc: Exception, env_name: str) -> tuple[str, str]:
    """(type name, message) sent back for a failed op; unexpected exceptions become EnvServerError."""
    if isinstance(exc, _PASS_THROUGH):
        return type(exc).__name__, str(exc)
    log.error("env %s raised", env_name, exc_info=exc)
    return "EnvServerError", f"{env_name} raised {type(exc).__name__}: {exc}"


def _drain(sock: socket.socket, inbox: "queue.SimpleQueue[Any]") -> None:
    """Move requests from the socket into `inbox` as they arrive, so the server's sends never block."""
    try:
        while True:
            inbox.put(frames.recv(sock))
    except (EOFError, OSError):
        inbox.put(None)  # the server is gone: shut down


def _send(sock: socket.socket, reply: tuple[Any, ...]) -> bool:
    """Send a reply; one that cannot be pickled goes back as an error. False when the socket is gone."""
    try:
        data = frames.encode(reply)
    except Exception as exc:  # noqa: BLE001 - e.g. an info dict holding an unpicklable object
        data = frames.encode((reply[0], False, ("EnvServerError", f"the env's reply could not be sent: {exc}")))
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def worker_main(sock: socket.socket) -> None:
    """The worker's loop: run requests in arrival order until "stop" or the server disappears."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the server, which stops us in order
    inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    threading.Thread(target=_drain, args=(sock, inbox), name="worker-inbox", daemon=True).start()
    sessions = _Sessions()
    names: dict[int, str] = {}
    try:
        while (message := inbox.get()) is not None:
            req_id, op, sid, args = message
            if op == "stop":
                break
            if op in ("create", "describe"):
                names[sid] = args.name
            try:
                reply = (req_id, True, sessions.handler(op)(sid, args))
            except Exception as exc:  # noqa: BLE001 - the boundary: report, keep serving
                reply = (req_id, False, _error(exc, names.get(sid, "env")))
            if op in ("close", "describe"):
                names.pop(sid, None)
            if not _send(sock, reply):
                break
    finally:
        sessions.close_all()


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve the socket pair end given as `--fd` until stopped."""
    parser = argparse.ArgumentParser(prog="python -m agentrl_core.env_service.worker", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="this worker's end of the server's socket pair")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s worker: %(message)s")
    worker_main(socket.socket(fileno=args.fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
