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
