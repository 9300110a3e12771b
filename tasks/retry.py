"""Which failures are worth a retry: transient infrastructure errors only, never a full disk."""

from __future__ import annotations

from typing import Any

from agentrl_core.system.diskfull import is_disk_full

TRANSIENT_NAMES = {"EnvServerUnavailable", "ConnectError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError",
                   "TimeoutError", "ConnectionError", "ConnectionResetError", "BrokenPipeError"}


def is_transient(exc: BaseException | None) -> bool:
    """True when the exception (or one it was raised from) is a transient infrastructure error.

    A full disk is never transient, wherever it sits in the chain: a retry would write into the same
    full disk, fail the same way and bury the message that says what to free.
    """
    if exc is None or is_disk_full(exc):
        return False
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__name__ in TRANSIENT_NAMES:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _failure(state: Any) -> BaseException | None:
    """The exception a failed task state holds (None when it holds none)."""
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we only classify it
        return exc
    return None


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: retry only when the task failed on a transient error."""
    return is_transient(_failure(state))


def retry_unless_disk_full(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn` for quick, idempotent tasks: retry any failure except a full disk."""
    exc = _failure(state)
    return exc is not None and not is_disk_full(exc)
