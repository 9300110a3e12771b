"""The HTTP layer every server shares (agentrl_core/web): error bodies, free ports, starting a server process."""

from __future__ import annotations

import logging
import socket
import sys

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from pydantic import BaseModel

from agentrl_core.errors import ServerStartError
from agentrl_core.web.error_bodies import ErrorKinds, install_error_handlers, respond_with_error_body
from agentrl_core.web.ports import free_port
from agentrl_core.web.server_process import spawn_server


class _Mine(Exception):
    pass


class _Body(BaseModel):
    n: int


def _app() -> FastAPI:
    app = FastAPI()

    async def mine(_: object, exc: Exception) -> object:
        return respond_with_error_body(409, "Mine", str(exc))

    install_error_handlers(app, respond_with_error_body, ErrorKinds(invalid="Invalid", unexpected="Boom",
                                                                    http={404: "NotFound"}),
                           log=logging.getLogger("test"), own=[(_Mine, mine)])

    @app.post("/echo")
    async def echo(body: _Body) -> dict:
        return {"n": body.n}

    @app.get("/mine")
    async def raise_mine() -> None:
        raise _Mine("its own error")

    @app.get("/busy")
    async def busy() -> None:
        raise HTTPException(503, "come back later", headers={"Retry-After": "3"})

    @app.get("/crash")
    async def crash() -> None:
        raise RuntimeError("a bug")

    return app


def test_every_failure_gets_its_status_and_a_json_body() -> None:
    with TestClient(_app(), raise_server_exceptions=False) as client:
        assert client.post("/echo", json={"n": 2}).json() == {"n": 2}
        bad = client.post("/echo", json={"n": "two"})
        assert bad.status_code == 422 and bad.json()["error"] == "Invalid" and "body.n" in bad.json()["detail"]
        own = client.get("/mine")
        assert (own.status_code, own.json()) == (409, {"error": "Mine", "detail": "its own error"})
        missing = client.get("/nowhere")
        assert missing.status_code == 404 and missing.json()["error"] == "NotFound"
        busy = client.get("/busy")
        assert busy.status_code == 503 and busy.json()["error"] == "HTTPError" and busy.headers["retry-after"] == "3"
        crash = client.get("/crash")
        assert (crash.status_code, crash.json()) == (500, {"error": "Boom", "detail": "RuntimeError: a bug"})


def test_free_port_is_free_right_now() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing holds it


def test_a_server_that_dies_at_start_is_an_error_with_its_output() -> None:
    with pytest.raises(ServerStartError, match=r"(?s)my server \(port auto\) exited during startup.*No module named"):
        spawn_server("agentrl_core.no_such_server", [], what="my server", startup_timeout=30)
    assert sys.modules.get("agentrl_core.no_such_server") is None
