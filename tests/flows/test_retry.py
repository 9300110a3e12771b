"""Tasks retry transient infrastructure errors only."""

import httpx

from agentrl_core.envs.errors import EnvServerUnavailable, InvalidRequestError
from agentrl_core.errors import ConfigError
from tasks.retry import is_transient


def _chained(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as err:
            raise outer from err
    except Exception as final:
        return final


def test_transient_errors_are_retried():
    assert is_transient(EnvServerUnavailable("connection refused"))
    assert is_transient(httpx.ConnectError("refused"))
    assert is_transient(_chained(RuntimeError("rollout failed"), TimeoutError()))


def test_bad_input_and_bugs_are_not_retried():
    assert not is_transient(ConfigError("unknown key"))
    assert not is_transient(InvalidRequestError("422"))
    assert not is_transient(ValueError("bug"))
    assert not is_transient(None)


class _FailedState:
    """A task run's final state as Prefect hands it to retry_condition_fn: result() raises its error."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def result(self):
        if self.error is not None:
            raise self.error
        return 1


def test_a_full_disk_is_never_retried_even_behind_a_transient_error():
    import errno

    from agentrl_core.errors import DiskFullError
    from tasks.retry import retry_transient, retry_unless_disk_full

    full = DiskFullError("/runs/a/grpo/checkpoints/step_000004", 0, "/runs")
    behind_transient = _chained(ConnectionError("env server went away"), full)
    raw = OSError(errno.ENOSPC, "No space left on device")
    sqlite = _chained(RuntimeError("registry write failed"), Exception("database or disk is full"))
    for error in (full, behind_transient, raw, sqlite):
        assert not is_transient(error)
        assert not retry_transient(None, None, _FailedState(error))
        assert not retry_unless_disk_full(None, None, _FailedState(error))
    assert retry_unless_disk_full(None, None, _FailedState(RuntimeError("database is locked")))
    assert retry_transient(None, None, _FailedState(httpx.ConnectError("refused")))
    assert not retry_unless_disk_full(None, None, _FailedState(None))


def test_recording_a_failed_run_never_raises_over_the_runs_own_error(monkeypatch):
    """The lifecycle ends the record failed in its `except`: the registry on the same full disk must not replace
    the error that stopped the run with its own."""
    from prefect.logging import disable_run_logger

    from agentrl_core.errors import DiskFullError
    from tasks import lifecycle

    def registry_full(registry_url, root, run_id, status):
        raise DiskFullError("/runs/registry.db", 0, "/runs")

    monkeypatch.setattr(lifecycle, "end_run", registry_full)
    with disable_run_logger():
        lifecycle.end_quietly(None, "/runs", "r", 1, "failed")  # returns: nothing raised
