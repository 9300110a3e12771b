"""The env server as a run starts it (inside `run_token()`): strangers on loopback get 401, the run's client is
served; request bodies are capped as they arrive, declared or chunked, with a 413 that says how to raise the cap."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from agentrl_core.env_service import ServerProcess, launch_server
from agentrl_core.env_service.client import EnvClient
from agentrl_core.env_service.server import MAX_BODY_ENV
from agentrl_core.web.auth import TOKEN_ENV, run_token

LIMIT = 256 << 10
"""The body cap this server is started with, through its environment variable (as a run would raise it)."""


@pytest.fixture(scope="module")
def run_server() -> Iterator[tuple[ServerProcess, str]]:
    """(server, the run's token); the token is in this process's environment only while starting it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(TOKEN_ENV, raising=False)
        mp.setenv(MAX_BODY_ENV, str(LIMIT / (1 << 20)))
        with run_token() as token:
            server = launch_server(["countdown"], workers=1)
    with server:
        yield server, token


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-run-token"}])
def test_a_stranger_is_refused_on_loopback(run_server, headers):
    server, token = run_server
    for method, path in (("POST", "/create"), ("POST", "/sessions"), ("GET", "/envs"), ("GET", "/metrics")):
        r = httpx.request(method, f"{server.url}{path}", json={}, headers=headers, timeout=10)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"] == "Unauthorized" and TOKEN_ENV in r.json()["detail"]
        assert token not in r.text
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert token not in server.log_tail(100_000)


def test_the_runs_client_is_served(run_server, monkeypatch):
    server, token = run_server
    monkeypatch.setenv(TOKEN_ENV, token)  # as inside the run: its clients and workers inherit the token
    with EnvClient(server.url) as client:
        sid, observation, _ = client.create("countdown", client.task_ids("countdown", "train")[0])
        assert observation
        client.close_session(sid)
    assert "bearer token required" in server.log_tail(100_000)


def _step_body(size: int) -> bytes:
    """A valid step body of exactly `size` bytes (the action padded with spaces)."""
    empty = json.dumps({"action": ""}).encode()
    return json.dumps({"action": " " * (size - len(empty))}).encode()


def test_a_body_at_the_limit_is_read_one_byte_more_is_a_413(run_server):
    server, token = run_server
    with httpx.Client(base_url=server.url, headers=_auth(token), timeout=30) as http:
        sid = http.post("/sessions", json={"env": "countdown", "task_id": 0}).json()["session_id"]
        at_limit = http.post(f"/sessions/{sid}/step", content=_step_body(LIMIT),
                             headers={"content-type": "application/json"})
        assert at_limit.status_code == 200, at_limit.text[:300]
        over = _step_body(LIMIT + 1)
        declared = http.post(f"/sessions/{sid}/step", content=over, headers={"content-type": "application/json"})
        pieces = iter([over[i:i + 4096] for i in range(0, len(over), 4096)])  # no Content-Length: chunked
        chunked = http.post(f"/sessions/{sid}/step", content=pieces, headers={"content-type": "application/json"})
        assert http.get("/health").status_code == 200
    for response in (declared, chunked):
        assert response.status_code == 413, response.text[:300]
        body = response.json()
        assert body["error"] == "RequestTooLargeError"
        assert f"limit of 0.25 MiB ({LIMIT} bytes)" in body["detail"]
        assert "--max-body-mb" in body["detail"] and MAX_BODY_ENV in body["detail"]


def test_an_endless_chunked_body_is_cut_off_not_drained(run_server):
    """A body that never ends gets its 413 once the cap is crossed; the server stops reading there."""
    server, token = run_server
    sent = 0

    def endless() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"action": "'
        while sent < 64 * LIMIT:  # bounded, so a server that drained it would still end the test
            sent += 16384
            yield b" " * 16384

    r = httpx.post(f"{server.url}/sessions/1/step", content=endless(), timeout=30,
                   headers={**_auth(token), "content-type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert sent < 64 * LIMIT  # the connection was closed long before the whole body was sent
