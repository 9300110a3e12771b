"""Interrupts: the first Ctrl-C or SIGTERM stops a run within seconds, however long one torch op is; a second exits.

Why the heavy work runs in a worker thread: CPython runs signal handlers only in the main thread,
between two bytecodes, so a main thread inside one long torch op (a backward pass, a bf16 matmul
emulated on an AVX2 CPU: tens of seconds) would see Ctrl-C only when the op returns. Checks between
micro-batches have the same limit. `run_interruptible` therefore runs the work in a worker thread
and keeps the main thread waiting on a lock, a wait that a signal ends at once (the handler runs
and the exception it raises ends the wait). The worker is then asked to stop — `StopRequested` is
raised in it asynchronously, at its next bytecode, so its `finally` blocks and context managers
unwind as usual — and given `GRACE_S` to do so. One still inside a long op after that is abandoned:
it is a daemon thread, it stops at its next bytecode, and the process may exit without waiting for
it (`abandoned_alive`). Nothing it may have been writing is at risk: checkpoints are published
atomically (marker last, then one rename), so resume never loads half of one.

The process policy (`install`): the first SIGINT/SIGTERM raises in the main thread — through the
handler that was there before when it has one (Prefect's turns SIGTERM into TerminationSignal,
so the flow run is recorded Crashed), else `Interrupted`, a KeyboardInterrupt — and a second one
runs the `on_second` callbacks (kill the run's children) and exits the process at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 2.0
"""How long an interrupted worker gets to unwind before it is abandoned."""
_WAIT_SLICE_S = 0.5

_first: int | None = None
_previous: dict[int, Any] = {}
_on_second: list[Callable[[], Any]] = []
_abandoned: list[threading.Event] = []


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by a signal (`.signum`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequested(BaseException):
    """Raised inside an interrupted worker thread: unwind and end (never caught by `except Exception`)."""


def requested() -> int | None:
    """The signal that asked this process to stop, if one did."""
    return _first


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, text.encode())  # no buffered stream: safe wherever the signal landed


def _exit_now(signum: int) -> None:
    """The second signal: kill the children (callbacks), exit with 128 + signal, no clean-up."""
    _say(f"\n{signal.Signals(signum).name} again: exiting now\n")
    for callback in _on_second:
        with contextlib.suppress(Exception):
            callback()
    os._exit(128 + signum)


def _is_echo(signum: int) -> bool:
    """True for Prefect's re-delivery of the first SIGTERM: after recording the flow run Crashed, its
    bridge sends the signal to the process again from inside `except TerminationSignal` (so that the
    handler before it runs too); that is the same request, not a second one."""
    handled = sys.exc_info()[1]
    return type(handled).__name__ == "TerminationSignal" and getattr(handled, "signal", None) == signum


def _handler(signum: int, frame: Any) -> None:
    global _first
    if _first is not None:
        if _is_echo(signum):
            return
        _exit_now(signum)
    _first = signum
    _say(f"\n{signal.Signals(signum).name}: stopping, recording the run's state (Ctrl-C again quits at once)\n")
    previous = _previous.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, frame)  # e.g. Prefect's bridge raises TerminationSignal: the flow run is marked Crashed
    raise Interrupted(signum)


def install(on_second: Callable[[], Any] | None = None) -> None:
    """From now on, handle SIGINT and SIGTERM as described above (main thread only; a signal this
    process ignores, e.g. SIGINT of a background job, stays ignored). `on_second` runs before the
    immediate exit of a second signal."""
    if on_second is not None and on_second not in _on_second:
        _on_second.append(on_second)
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current in (signal.SIG_IGN, _handler):
            continue
        _previous[sig] = current
        signal.signal(sig, _handler)


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
    """`install()` for the block, on top of whatever handles the signals now (e.g. Prefect's SIGTERM
    bridge, installed while a flow runs). Restored after, unless a signal came: then the handler
    stays, so that a second signal during the clean-up exits at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: (signal.getsignal(sig), _previous.get(sig)) for sig in SIGNALS}
    install()
    try:
        yield
    finally:
        if _first is None:
            for sig, (handler, previous) in saved.items():
                if handler is not None:
                    signal.signal(sig, handler)
                _previous[sig] = previous


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    """Raise `exc_type` in `thread` at its next bytecode (CPython's PyThreadState_SetAsyncExc)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def _stop(worker: threading.Thread, done: threading.Event, grace_s: float) -> None:
    """Ask `worker` to stop, wait up to `grace_s`, abandon it if it is still inside one op."""
    _raise_in(worker, StopRequested)
    if not done.wait(grace_s):
        _abandoned.append(done)
        log.warning("%s is inside one long operation: left behind (it stops when the operation returns)",
                    worker.name)


def abandoned_alive() -> bool:
    """True while an abandoned worker is still running: exit with os._exit, not through interpreter shutdown."""
    return any(not done.is_set() for done in _abandoned)


def run_interruptible(fn: Callable[..., T], /, *args: Any, grace_s: float = GRACE_S, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, run in a worker thread (with this thread's context variables) while this,
    the main, thread waits ready for signals; a signal's exception stops the worker (see above) and
    propagates here. Called from any other thread, `fn` just runs there.

    The wait is on an Event, not `Thread.join`: a join interrupted by an exception marks a running
    thread as stopped in CPython 3.11 (bpo-45274's clean-up releases the thread's own lock).
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            box["result"] = context.run(fn, *args, **kwargs)
        except StopRequested:
            box["stopped"] = True
        except BaseException as exc:  # handed to the main thread, which raises it
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name=f"agentrl-{getattr(fn, '__name__', 'work')}", daemon=True)
    with handling_signals():
        try:
            worker.start()
            while not done.wait(_WAIT_SLICE_S):
                pass
        except BaseException:
            _stop(worker, done, grace_s)
            raise
    if "error" in box:
        raise box["error"]
    if box.get("stopped"):  # stopped from outside without a signal here (e.g. a test): say so
        raise Interrupted(_first or signal.SIGINT)
    return box["result"]


def reset_for_tests() -> None:
    """Forget a recorded signal and the callbacks (tests only; handlers are left as they are)."""
    global _first
    _first = None
    _on_second.clear()
    _abandoned.clear()
