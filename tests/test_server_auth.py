"""A server with a bearer token requires it on every address (401 without it, saying how; served with it); one
without a token is open on loopback and says so, and refuses to start beyond loopback. The non-loopback servers
here bind this machine's own non-loopback address (or 0.0.0.0)."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agentrl_core.env_service import launch_server
from agentrl_core.env_service.client import EnvClient
from agentrl_core.envs.errors import ServerStartError
from agentrl_core.web.auth import (
    TOKEN_ENV,
    UnauthenticatedBindError,
    auth_banner,
    check_bind,
    protect,
    server_tokens,
)

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


def _app(host: str, *tokens: str) -> TestClient:
    app = FastAPI()
    app.get("/health")(lambda: {"ok": True})
    app.get("/work")(lambda: {"done": True})
    protect(app, host, tokens=tokens, error_body=lambda m: {"error": "Unauthorized", "detail": m})
    return TestClient(app)


def test_non_loopback_without_a_token_is_refused_unless_allowed(caplog):
    with pytest.raises(UnauthenticatedBindError, match=f"{TOKEN_ENV}.*--allow-unauthenticated"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", None, allow_unauthenticated=True)
    assert "accepts requests from anyone" in caplog.text
    check_bind("127.0.0.1", None)  # loopback needs none


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_server_with_a_token_requires_it_on_every_address(host):
    server = _app(host, TOKEN)
    denied = server.get("/work")
    assert denied.status_code == 401 and "has none" in denied.json()["detail"]
    assert "Authorization: Bearer" in denied.json()["detail"] and TOKEN_ENV in denied.json()["detail"]
    assert denied.headers["www-authenticate"].startswith("Bearer")
    wrong = server.get("/work", headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401 and "not this server's" in wrong.json()["detail"]
    assert server.get("/work", headers={"Authorization": TOKEN}).status_code == 401  # the scheme is required
    assert TOKEN not in denied.text + wrong.text
    assert server.get("/work", headers={"Authorization": f"Bearer {TOKEN}"}).json() == {"done": True}
    assert server.get("/work", headers={"Authorization": f"bearer  {TOKEN} "}).status_code == 200
    assert server.get("/health").status_code == 200  # liveness probes need no token


def test_any_of_several_tokens_is_accepted():
    server = _app("127.0.0.1", TOKEN, "api-key-42")  # e.g. the OpenAI server: the run's token or its API key
    for token in (TOKEN, "api-key-42"):
        assert server.get("/work", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert server.get("/work", headers={"Authorization": "Bearer api-key-4"}).status_code == 401


def test_without_a_token_loopback_is_open_and_the_banner_says_how_to_close_it(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert server_tokens() == () and server_tokens(None, "k") == ("k",)
    assert _app("127.0.0.1").get("/work").status_code == 200  # header-less AgentGym clients
    banner = auth_banner("127.0.0.1", required=False)
    assert "open to every user" in banner and f"start it with {TOKEN_ENV} set" in banner
    assert "header-less clients (e.g. AgentGym's) are refused" in auth_banner("127.0.0.1", required=True)
    assert "WARNING" in auth_banner("0.0.0.0", required=False)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert server_tokens("k", TOKEN) == (TOKEN, "k")


def test_the_standalone_env_server_without_a_token_is_open_on_loopback_and_says_so(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with launch_server(["countdown"], workers=1) as server:
        assert httpx.get(f"{server.url}/envs", timeout=10).status_code == 200
        said = server.log_tail(100_000)
        assert "no bearer token: open to every user" in said and TOKEN_ENV in said


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
