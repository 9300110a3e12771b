"""Interrupts: work in a worker thread stops on the first signal even inside one long call; a second exits."""

from __future__ import annotations

import contextvars
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agentrl_core.system import stop_signals

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 15.0  # generous: the machine running the tests may be busy

# A long call that holds no GIL and cannot be interrupted, as one long torch op (a backward pass) is.
SCRIPT_HEAD = textwrap.dedent("""
    import os, signal, sys, time
    from agentrl_core.system import stop_signals

    def long_call():
        print("started", flush=True)
        time.sleep(120)
""")


def _start(body: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT_HEAD + textwrap.dedent(body)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    return proc


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        proc.wait(timeout=60)
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout is not None
    return proc.returncode, proc.stdout.read(), seconds  # read() includes what readline() buffered


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_stops_work_stuck_in_one_long_call(sig):
    proc = _start("""
        stop_signals.install()
        try:
            stop_signals.run_interruptible(long_call, grace_s=0.5)
        except KeyboardInterrupt as exc:
            print("interrupted by", type(exc).__name__, signal.Signals(exc.signum).name,
                  "abandoned" if stop_signals.abandoned_alive() else "joined", flush=True)
            os._exit(3)
    """)
    time.sleep(0.3)
    os.killpg(proc.pid, sig)
    code, out, seconds = _finish(proc)
    assert (code, seconds < BOUND_S) == (3, True), out
    assert f"interrupted by Interrupted {sig.name} abandoned" in out


def test_worker_unwinds_through_its_finally_blocks():
    proc = _start("""
        def python_loop():
            print("started", flush=True)
            try:
                while True:
                    time.sleep(0.01)
            finally:
                print("worker cleaned up", flush=True)

        stop_signals.install()
        try:
            stop_signals.run_interruptible(python_loop)
        except KeyboardInterrupt:
            print("abandoned" if stop_signals.abandoned_alive() else "joined", flush=True)
    """)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    code, out, _ = _finish(proc)
    assert "worker cleaned up" in out and out.strip().endswith("joined"), out


def test_second_signal_runs_the_callbacks_and_exits_at_once():
    proc = _start("""
        stop_signals.install(on_second=lambda: print("killing children", flush=True))
        try:
            stop_signals.run_interruptible(long_call, grace_s=0.2)
        except KeyboardInterrupt:
            print("cleaning up slowly", flush=True)
            time.sleep(60)
    """)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    code, out, seconds = _finish(proc)
    assert code == 128 + signal.SIGINT and seconds < BOUND_S, out
    assert "cleaning up slowly" in out and "killing children" in out and "SIGINT again: exiting now" in out


def test_prefect_style_echo_of_sigterm_is_not_a_second_signal():
    # Prefect's SIGTERM bridge raises TerminationSignal and, once the flow run is recorded, sends the
    # same signal again from inside its `except` block so the handler before it runs too.
    proc = _start("""
        class TerminationSignal(BaseException):
            def __init__(self, sig):
                self.signal = sig

        def bridge(signum, frame):
            raise TerminationSignal(signum)

        stop_signals.install()
        before = signal.signal(signal.SIGTERM, bridge)
        try:
            stop_signals.run_interruptible(long_call, grace_s=0.2)
        except TerminationSignal:
            signal.signal(signal.SIGTERM, before)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            print("still here after the echo", flush=True)
    """)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGTERM)
    code, out, _ = _finish(proc)
    assert code == 0 and "still here after the echo" in out, out


def test_ignored_signal_stays_ignored():
    proc = _start("""
        print("started", flush=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a non-interactive shell
        stop_signals.install()
        print("handler", signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)
    """)
    code, out, _ = _finish(proc)
    assert "handler True" in out, out


def test_result_exceptions_and_context_pass_through_the_worker():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("from the caller")
    seen: list[str] = []

    def work(x: int, *, y: int) -> int:
        seen.append(threading.current_thread().name)
        return x + y + len(var.get())

    assert stop_signals.run_interruptible(work, 1, y=2) == 3 + len("from the caller")
    assert seen == ["agentrl-work"]

    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        stop_signals.run_interruptible(fail)


def test_off_the_main_thread_the_work_runs_in_place():
    names: list[str] = []
    thread = threading.Thread(target=lambda: names.append(stop_signals.run_interruptible(
        lambda: threading.current_thread().name)), name="caller")
    thread.start()
    thread.join()
    assert names == ["caller"]
