"""EnvClient: typed exceptions for each server error, bounded retries only on transient failures."""

from __future__ import annotations

from typing import Callable, Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from agentrl_core.env_service import EnvClient, RemoteEnv, create_app
from agentrl_core.env_service.client import SESSION_START_TIMEOUT_S
from agentrl_core.envs import StepResult
from agentrl_core.envs.errors import (
    EnvError,
    EnvServerError,
    EnvServerUnavailable,
    InvalidRequestError,
    ResetNeededError,
    SessionNotFoundError,
    StepOutOfOrderError,
    TaskNotFoundError,
    TooManySessionsError,
    UnknownEnvError,
)

HOSTED = ["countdown", "household", "math"]
Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A MockTransport handler replaying scripted outcomes; records calls and sleeps."""

    def __init__(self, *outcomes: int | Exception, body: dict | None = None, headers: dict | None = None) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.sleeps: list[float] = []
        self.body = body
        self.headers = headers or {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, Exception):
            raise outcome
        if outcome == 200:
            return httpx.Response(200, json=self.body or {"status": "ok", "envs": [], "sessions": 0})
        return httpx.Response(outcome, json={"error": "X", "detail": f"scripted {outcome}"}, headers=self.headers)

    def client(self, retries: int = 3, backoff: float = 0.5) -> EnvClient:
        return EnvClient("http://env", retries=retries, backoff=backoff, transport=httpx.MockTransport(self), sleep=self.sleeps.append)


def connect_error() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


# -- retries (MockTransport) -------------------------------------------------------------------------
def test_connection_errors_retry_with_exponential_backoff_then_give_up() -> None:
    rec = Recorder(connect_error())
    with pytest.raises(EnvServerUnavailable, match="gave up after 4 attempts"):
        rec.client(retries=3, backoff=0.5).health()
    assert rec.calls == 4 and rec.sleeps == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_transient_statuses_are_retried(status: int) -> None:
    rec = Recorder(status, status, 200)
    assert rec.client().health()["status"] == "ok"
    assert rec.calls == 3 and rec.sleeps == [0.5, 1.0]


def test_timeouts_are_retried_on_safe_requests() -> None:
    rec = Recorder(httpx.ReadTimeout("slow"), 200)
    assert rec.client().health()["status"] == "ok" and rec.calls == 2


def test_retry_after_is_honoured_and_429_exhausted_is_typed() -> None:
    rec = Recorder(429, headers={"Retry-After": "3"})
    with pytest.raises(TooManySessionsError):
        rec.client(retries=2, backoff=0.1).health()
    assert rec.calls == 3 and rec.sleeps == [3.0, 3.0]


@pytest.mark.parametrize("status", [400, 404, 409, 422, 500])
def test_other_errors_are_not_retried(status: int) -> None:
    rec = Recorder(status)
    with pytest.raises(EnvError, match=f"scripted {status}"):
        rec.client().health()
    assert rec.calls == 1 and rec.sleeps == []


def test_a_step_is_retried_only_when_it_never_reached_the_server() -> None:
    ok = {"observation": "o", "reward": 0.0, "terminated": False, "truncated": False, "info": {}}
    rec = Recorder(connect_error(), 200, body=ok)
    assert rec.client().step(1, "look") == StepResult("o", 0.0, False, False, {})
    assert rec.calls == 2
    for outcome in (httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped"), 503, 502):
        rec = Recorder(outcome, 200, body=ok)
        with pytest.raises(EnvServerUnavailable):
            rec.client().step(1, "look")
        assert rec.calls == 1, outcome  # it may have been applied: never resend


def test_a_numbered_step_is_resent_when_its_answer_was_lost_or_refused() -> None:
    ok = {"observation": "o", "reward": 0.0, "terminated": False, "truncated": False, "info": {}}
    for outcome in (httpx.ReadError("[Errno 9] Bad file descriptor"), httpx.ReadTimeout("slow"), 503, 429):
        rec = Recorder(outcome, 200, body=ok)
        assert rec.client().step(1, "look", 0) == StepResult("o", 0.0, False, False, {})
        assert rec.calls == 2, outcome  # the server answers a resend of its last step without applying it again
    for status in (504, 502, 500):  # the server answered: the env call failed (504: timed out, its worker stopped)
        rec = Recorder(status, 200, body=ok)
        with pytest.raises(EnvError):
            rec.client().step(1, "look", 0)
        assert rec.calls == 1, status


def test_a_session_is_created_once_however_long_its_start_takes() -> None:
    created = {"session_id": 7, "observation": "o", "info": {}}
    for outcome in (httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped"), 502):
        rec = Recorder(outcome, 200, body=created)
        with pytest.raises(EnvServerUnavailable):
            rec.client().create("countdown", 0)
        assert rec.calls == 1, outcome  # sent: the server may be starting it; a resend would start a second
    for refused in (429, 503):  # the server did nothing: sending again is safe
        rec = Recorder(refused, 200, body=created)
        assert rec.client().create("countdown", 0) == (7, "o", {}) and rec.calls == 2
    rec = Recorder(connect_error(), 200, body=created)  # never reached the server
    assert rec.client().create("countdown", 0)[0] == 7 and rec.calls == 2


def test_a_session_start_is_given_longer_than_other_requests() -> None:
    seen: dict[str, dict] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = request.extensions["timeout"]
        body = {"session_id": 1, "observation": "o", "info": {}} if request.url.path == "/sessions" else {}
        return httpx.Response(200, json=body)

    client = EnvClient("http://env", timeout=5.0, transport=httpx.MockTransport(handler))
    client.create("countdown", 0)
    client.health()
    assert seen["/sessions"]["read"] == SESSION_START_TIMEOUT_S and seen["/sessions"]["connect"] == 5.0
    assert seen["/health"]["read"] == 5.0

def test_zero_retries_means_one_attempt() -> None:
    rec = Recorder(connect_error())
    with pytest.raises(EnvServerUnavailable):
        rec.client(retries=0).health()
    assert rec.calls == 1


def test_non_json_error_bodies_still_map_by_status() -> None:
    client = EnvClient("http://env", transport=httpx.MockTransport(lambda r: httpx.Response(409, text="<html>")))
    with pytest.raises(ResetNeededError, match="HTTP 409"):
        client.health()


# -- typed exceptions against the real app (in-process) ---------------------------------------------
@pytest.fixture()
def env_client() -> Iterator[EnvClient]:
    with TestClient(create_app(HOSTED, max_sessions=3, workers=1), raise_server_exceptions=False) as tc:
        yield EnvClient("http://testserver", http=tc, retries=0)


def test_each_server_error_has_its_typed_exception(env_client: EnvClient) -> None:
    with pytest.raises(UnknownEnvError, match="countdown, household"):
        env_client.create("nope", 0)
    with pytest.raises(UnknownEnvError):
        env_client.env_info("nope")
    with pytest.raises(TaskNotFoundError, match="5500"):
        env_client.create("countdown", 5500)
    with pytest.raises(SessionNotFoundError, match="no session 777"):
        env_client.step(777, "look")
    with pytest.raises(InvalidRequestError, match="split"):
        env_client.task_ids("countdown", "validation")
    sid, _, _ = env_client.create("countdown", 0)
    env_client.step(sid, env_client.expert(sid))
    with pytest.raises(ResetNeededError):
        env_client.step(sid, "x")
    env_client.create("countdown", 0)
    env_client.create("countdown", 0)
    with pytest.raises(TooManySessionsError, match="limit of 3"):
        env_client.create("countdown", 0)
    env_client.close(sid)
    with pytest.raises(SessionNotFoundError):
        env_client.close(sid)


def test_typed_exceptions_carry_the_status(env_client: EnvClient) -> None:
    with pytest.raises(SessionNotFoundError) as err:
        env_client.expert(5)
    assert err.value.status_code == 404  # type: ignore[attr-defined]
    assert "HTTP 404 from GET /sessions/5/expert" in str(err.value)


def test_server_error_message_includes_the_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl_core.envs import registry
    from tests.envs.test_envs_server import Boom

    monkeypatch.setitem(registry._REGISTRY, "boom", Boom)
    with TestClient(create_app(["boom"], workers=1), raise_server_exceptions=False) as tc:
        client = EnvClient("http://testserver", http=tc, retries=0)
        sid, _, _ = client.create("boom", 0)
        with pytest.raises(EnvServerError, match="boom raised ZeroDivisionError: secret internals"):
            client.step(sid, "boom")


def test_client_api(env_client: EnvClient) -> None:
    assert env_client.health()["envs"] == HOSTED
    assert [e.name for e in env_client.envs()] == HOSTED
    assert env_client.task_ids("household", "test")[:2] == [10_000, 10_001]
    sid, obs, info = env_client.create("household", 3)
    assert obs.startswith("You are in the middle") and info["won"] is False
    assert env_client.reset(sid, 3) == (obs, info)
    result = env_client.step(sid, env_client.expert(sid))
    assert isinstance(result, StepResult) and result.reward == 0.0


def test_remote_env_reuses_its_session(env_client: EnvClient) -> None:
    env = RemoteEnv(env_client, "countdown")
    assert (env.name, env.max_steps) == ("countdown", 3) and "<answer>" in env.action_format
    with pytest.raises(ResetNeededError):
        env.step("x")
    env.reset(task_id=0)
    first = env.session_id
    env.reset(task_id=1)
    assert env.session_id == first
    assert env.step(env.expert_action()).reward == 1.0
    env.close()
    assert env.session_id is None and env_client.health()["sessions"] == 0
    env.close()  # idempotent


class LosesAStepAnswer:
    """EnvClient's `http`: the app answers every request, but the answer to step `lose` is lost on the way back
    (the read fails after the server applied the step)."""

    def __init__(self, app_client: TestClient, lose: int) -> None:
        self.app_client, self.lose, self.steps = app_client, lose, 0

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        resp = self.app_client.request(method, path, **kwargs)
        if path.endswith("/step"):
            self.steps += 1
            if self.steps == self.lose:
                raise httpx.ReadError("[Errno 9] Bad file descriptor")
        return resp

    def close(self) -> None:
        pass


def test_a_step_whose_answer_was_lost_is_applied_once() -> None:
    """RemoteEnv numbers its steps: the resend of a step the server applied gets the same result back, and the
    game moves on from there (a step applied twice would be a second action the agent never chose)."""
    with TestClient(create_app(["household"], workers=1), raise_server_exceptions=False) as tc:
        env = RemoteEnv(EnvClient("http://testserver", http=LosesAStepAnswer(tc, lose=2), backoff=0.0), "household")
        reference = RemoteEnv(EnvClient("http://testserver", http=tc, retries=0), "household")
        for played in (env, reference):
            played.reset(task_id=3)
        for _ in range(3):
            action = reference.expert_action()
            assert env.step(action) == reference.step(action)
        assert env.steps == reference.steps == 3
        metrics = tc.get("/metrics").json()
        assert (metrics["steps_total"], metrics["steps_repeated"]) == (6, 1)
        env.reset(task_id=3)
        assert env.steps == 0


def test_a_step_out_of_order_is_refused(env_client: EnvClient) -> None:
    sid, _, _ = env_client.create("household", 3)
    with pytest.raises(StepOutOfOrderError, match="step 1 of session .* has taken 0 steps") as err:
        env_client.step(sid, "look", 1)
    assert err.value.status_code == 409  # type: ignore[attr-defined]
    first = env_client.step(sid, "look", 0)
    assert env_client.step(sid, "look", 0) == first  # the last step, sent again: its result, not a second look
    with pytest.raises(StepOutOfOrderError, match="with the same action"):
        env_client.step(sid, "inventory", 0)
    env_client.reset(sid, 3)
    assert env_client.step(sid, "look", 0) == first


def test_unreachable_server_is_unavailable() -> None:
    client = EnvClient("http://127.0.0.1:9", timeout=1.0, retries=1, backoff=0.0)  # port 9: discard, closed
    with pytest.raises(EnvServerUnavailable, match="Is the env server running"):
        client.health()
