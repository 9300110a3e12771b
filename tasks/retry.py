"""Which failures are worth a retry: transient infrastructure errors only."""

from __future__ import annotations

from typing import Any

TRANSIENT_NAMES = {"EnvServerUnavailable", "ConnectError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError",
                   "TimeoutError", "ConnectionError", "ConnectionResetError", "BrokenPipeError"}


def is_transient(exc: BaseException | None) -> bool:
    """True when the exception (or one it was raised from) is a transient infrastructure error."""
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__name__ in TRANSIENT_NAMES:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: retry only when the task failed on a transient error."""
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we only classify it
        return is_transient(exc)
    return False
