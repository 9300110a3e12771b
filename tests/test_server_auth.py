"""Servers beyond loopback need the bearer token: 401 without it (saying how), served with it, refused to start
without one. The non-loopback servers here bind this machine's own non-loopback address (or 0.0.0.0)."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agentrl_core.envs import launch_server
from agentrl_core.envs.client import EnvClient
from agentrl_core.envs.errors import ServerStartError
from agentrl_core.server_auth import TOKEN_ENV, UnauthenticatedBindError, check_bind, protect

TOKEN = "test-token-0123456789"


def _local_address() -> str:
    """A non-loopback address of this machine, else 0.0.0.0 (still non-loopback to the server)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = s.getsockname()[0]
    except OSError:
        return "0.0.0.0"
    return address if not address.startswith("127.") else "0.0.0.0"


def _app(host: str, token: str | None) -> TestClient:
    app = FastAPI()
    app.get("/health")(lambda: {"ok": True})
    app.get("/work")(lambda: {"done": True})
    protect(app, host, token=token, error_body=lambda m: {"error": "Unauthorized", "detail": m})
    return TestClient(app)


def test_non_loopback_without_a_token_is_refused_unless_allowed(caplog):
    with pytest.raises(UnauthenticatedBindError, match=f"{TOKEN_ENV}.*--allow-unauthenticated"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", None, allow_unauthenticated=True)
    assert "accepts requests from anyone" in caplog.text
    check_bind("127.0.0.1", None)  # loopback needs none


def test_middleware_rules():
    remote = _app("0.0.0.0", TOKEN)
    denied = remote.get("/work")
    assert denied.status_code == 401 and "Authorization: Bearer" in denied.json()["detail"]
    assert TOKEN not in denied.text
    assert denied.headers["www-authenticate"].startswith("Bearer")
    assert remote.get("/work", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert remote.get("/work", headers={"Authorization": f"Bearer {TOKEN}"}).json() == {"done": True}
    assert remote.get("/health").status_code == 200  # liveness probes need no token
    local = _app("127.0.0.1", TOKEN)
    assert local.get("/work").status_code == 200  # header-less AgentGym clients on loopback
    assert local.get("/work", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_env_server_beyond_loopback(monkeypatch):
    host = _local_address()
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ServerStartError, match="refusing to start"):
        launch_server(["countdown"], host=host, workers=1)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with launch_server(["countdown"], host=host, workers=1) as server:
        url = f"http://127.0.0.1:{server.port}" if host == "0.0.0.0" else server.url
        anonymous = httpx.post(f"{url}/create", json={}, timeout=10)
        assert anonymous.status_code == 401, anonymous.text
        assert "AGENTRL_SERVER_TOKEN" in anonymous.json()["detail"]
        assert TOKEN not in anonymous.text and TOKEN not in server.log_tail(100_000)
        with EnvClient(url) as client:  # agentrl's client sends $AGENTRL_SERVER_TOKEN
            ids = client.task_ids("countdown", "test")
            sid, observation, _ = client.create("countdown", ids[0])
            assert observation
            client.close_session(sid)
