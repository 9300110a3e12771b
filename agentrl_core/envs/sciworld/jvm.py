"""One ScienceWorld JVM: launched with a heap cap, counted against a per-process limit, shut down for sure.

`scienceworld.ScienceWorldEnv.__init__` (1.2.3) starts its JVM with py4j's
`launch_gateway(classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, return_proc=True)`: no
`javaopts`, so no -Xmx (the JVM default heap is 1/4 of the machine's memory), and a Python
callback server per env that the simulator never uses. Rather than patch it, `Simulator` launches
the same jar the same way with `javaopts=["-Xmx<N>m", ...]` and talks to the same entry point
(`scienceworld.runtime.pythonapi.PythonInterface`) directly; the package's files are untouched.

Live JVMs in this process are limited by a module-level bounded semaphore of `MAX_LIVE_JVMS`
slots: starting one more raises JVMLimitError instead of exhausting memory. A slot is taken
when a JVM starts and given back when it is shut down (close(), or garbage collection of the
Simulator as a last resort). `die_on_exit` makes the JVM exit when this Python process dies.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from agentrl_core.errors import EnvError, MissingExtraError

log = logging.getLogger(__name__)

DEFAULT_HEAP_MB = 1024
MAX_LIVE_JVMS = 8  # per process; SciWorld.max_sessions matches it
MIN_HEAP_MB = 128  # below this the simulator runs out of heap on loading some tasks
_SHUTDOWN_WAIT_S = 5.0

_LIVE = threading.BoundedSemaphore(MAX_LIVE_JVMS)


class JVMLimitError(EnvError, RuntimeError):
    """This process already runs MAX_LIVE_JVMS ScienceWorld JVMs: close() envs you are done with."""


class JVMGoneError(EnvError, RuntimeError):
    """The ScienceWorld JVM of this env exited (killed, crashed): reset() starts a new one."""


class SimulatorError(EnvError, RuntimeError):
    """The simulator raised inside the JVM (e.g. java.lang.OutOfMemoryError: raise jvm_heap_mb)."""


def java_options(heap_mb: int | None, extra: Sequence[str] = ()) -> list[str]:
    """The JVM options: `-Xmx<heap_mb>m` (none when heap_mb is None: the JVM's default) then `extra`."""
    if heap_mb is not None and (not isinstance(heap_mb, int) or heap_mb < MIN_HEAP_MB):
        raise ValueError(f"jvm_heap_mb must be an int >= {MIN_HEAP_MB} (or None for no cap), got {heap_mb!r}")
    for opt in extra:
        if not isinstance(opt, str) or not opt.startswith("-"):
            raise ValueError(f"java options must be strings starting with '-', got {opt!r}")
    return ([f"-Xmx{heap_mb}m"] if heap_mb is not None else []) + list(extra)


def _acquire_slot() -> None:
    if not _LIVE.acquire(blocking=False):
        raise JVMLimitError(
            f"{MAX_LIVE_JVMS} ScienceWorld JVMs are already live in this process (one per SciWorld env "
            "after its first reset); close() the envs you no longer use, or run more worker processes"
        )


def _shutdown(gateway: Any, proc: subprocess.Popen, slot: threading.BoundedSemaphore) -> None:
    """Stop the gateway, end the JVM (EOF on its stdin, then kill) and give the slot back."""
    try:
        try:
            gateway.shutdown()
        except Exception:
            log.debug("py4j gateway shutdown failed", exc_info=True)
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()  # die_on_exit: the JVM exits when its stdin closes
            except OSError:
                pass
        try:
            proc.wait(timeout=_SHUTDOWN_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("ScienceWorld JVM %s did not exit in %.0f s; killing it", proc.pid, _SHUTDOWN_WAIT_S)
            proc.kill()
            proc.wait(timeout=_SHUTDOWN_WAIT_S)
    finally:
        slot.release()


class Simulator:
    """A ScienceWorld engine in a JVM of its own. Not thread-safe: one caller at a time."""

    def __init__(self, heap_mb: int | None = DEFAULT_HEAP_MB, java_opts: Sequence[str] = ()) -> None:
        self.java_opts = java_options(heap_mb, java_opts)
        if shutil.which("java") is None:
            raise MissingExtraError(
                "ScienceWorld needs a Java runtime (17 or newer) on PATH, e.g. apt-get install openjdk-17-jre-headless"
            )
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        _acquire_slot()
        try:
            port, proc = launch_gateway(
                classpath=JAR_PATH, javaopts=self.java_opts, die_on_exit=True, cwd=BASEPATH, return_proc=True
            )
        except BaseException:
            _LIVE.release()
            raise
        gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=proc)
        self._proc = proc
        self._finalizer = weakref.finalize(self, _shutdown, gateway, proc, _LIVE)
        try:
            self._server = gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        except BaseException:
            self._finalizer()
            raise

    # -- process ---------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The JVM's process id."""
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """True until the JVM exits or close() runs."""
        return self._finalizer.alive and self._proc.poll() is None

    def close(self) -> None:
        """Shut the JVM down and wait for it to exit (idempotent)."""
        self._finalizer()

    def _call(self, method: str, *args: Any) -> Any:
        """Call the simulator: an exception inside it becomes SimulatorError, a broken JVM JVMGoneError."""
        from py4j.protocol import Py4JError, Py4JJavaError

        if not self.alive:
            raise JVMGoneError(f"the ScienceWorld JVM (pid {self.pid}) is not running; reset() starts a new one")
        try:
            return getattr(self._server, method)(*args)
        except Py4JJavaError as exc:  # an exception thrown inside the simulator
            text = str(exc.java_exception) if exc.java_exception is not None else str(exc)
            raise SimulatorError(f"ScienceWorld {method}{args!r} failed in the JVM (pid {self.pid}): {text}") from exc
        except Py4JError as exc:  # a protocol error: usually the JVM died or was killed
            if self._exited_within(1.0):
                raise JVMGoneError(f"lost the ScienceWorld JVM (pid {self.pid}): {exc}; reset() starts a new one") from exc
            raise SimulatorError(f"ScienceWorld {method}{args!r}: py4j error with the JVM running: {exc}") from exc

    def _exited_within(self, seconds: float) -> bool:
        try:
            self._proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    # -- the engine ------------------------------------------------------------------------------
    def load(self, task_name: str, variation: int, *, gold_path: bool = False) -> None:
        """Load variation `variation` of `task_name` (no simplifications); `gold_path` also plans one."""
        self._call("load", task_name, int(variation), "", bool(gold_path))

    def step(self, command: str) -> str:
        """Run one text command; the engine's reply (unknown commands get a message, not an error)."""
        return str(self._call("step", command))

    def raw_score(self) -> int:
        """The task score in [-100, 100] (the engine reports [-1, 1]; ScienceWorld rounds it to an int)."""
        return int(round(100 * float(self._call("getScore"))))

    def completed(self) -> bool:
        """The engine's own end flag (it is not set on failure: a negative score means failure)."""
        return bool(self._call("getCompleted"))

    def moves(self) -> int:
        """Simulator moves so far ("wait" counts 10)."""
        return int(self._call("getNumMoves"))

    def task_description(self) -> str:
        return str(self._call("getTaskDescription"))

    def gold_actions(self) -> list[str]:
        """The gold action sequence of the loaded task (load it with gold_path=True first)."""
        return [str(a) for a in self._call("getGoldActionSequence")]

    def valid_actions(self) -> list[str]:
        """Every valid action-object combination in the current state (hundreds; ~0.05-0.3 s)."""
        return [str(a) for a in self._call("getValidActionObjectCombinations")]

    def variations(self, split: str) -> list[int]:
        """The loaded task's variations in ScienceWorld's "train", "dev" or "test" split."""
        method = {"train": "getVariationsTrain", "dev": "getVariationsDev", "test": "getVariationsTest"}[split]
        return [int(v) for v in self._call(method)]

    def max_variations(self, task_name: str) -> int:
        return int(self._call("getTaskMaxVariations", task_name))


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (Linux /proc), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
