"""Prefect's temporary API server, started as `agentrl run` starts it, answers only the run's credential."""

from __future__ import annotations

import os

import httpx
import pytest

from agentrl import prefect_server
from agentrl_core.system import child_processes


def test_each_run_gets_a_fresh_user_password_credential(monkeypatch):
    monkeypatch.delenv(prefect_server.CLIENT_AUTH_ENV, raising=False)
    first, second = prefect_server.run_credential(), prefect_server.run_credential()
    user, _, password = first.partition(":")
    assert user and len(password) >= 32 and first != second


def test_a_credential_the_user_set_is_the_one_the_server_requires(monkeypatch):
    monkeypatch.setenv(prefect_server.CLIENT_AUTH_ENV, "me:mine")
    assert prefect_server.run_credential() == "me:mine"


@pytest.fixture(scope="module")
def run_api(tmp_path_factory):
    """`local_prefect_api()` with no Prefect server configured (so it starts one, as `agentrl run` does), its
    database in a folder of its own: (API url, the server's pid, that folder)."""
    from prefect.settings import (PREFECT_API_URL, PREFECT_HOME, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
                                  temporary_settings)

    from agentrl.prefect_env import STARTUP_TIMEOUT_S

    home = tmp_path_factory.mktemp("prefect-home")
    before = set(child_processes.tracked_pids())
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(prefect_server.CLIENT_AUTH_ENV, raising=False)
        # the start-up time `agentrl run` allows (Prefect's own 20 s ran out on a busy 2-core machine)
        updates = {PREFECT_HOME: home, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: STARTUP_TIMEOUT_S}
        with temporary_settings(updates=updates, restore_defaults={PREFECT_API_URL}):
            with prefect_server.local_prefect_api() as url:
                (pid,) = set(child_processes.tracked_pids()) - before
                yield url, pid, home


@pytest.mark.slow
def test_a_stranger_is_refused_and_the_run_client_works(run_api):
    from prefect.client.orchestration import get_client

    url, _, _ = run_api
    route = f"{url}/flows/filter"
    assert httpx.post(route, json={}, timeout=10).status_code == 401  # no credential
    assert httpx.post(route, json={}, auth=("agentrl", "guessed"), timeout=10).status_code == 401
    assert httpx.post(route, json={}, headers={"Authorization": "Bearer x"}, timeout=10).status_code == 401
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # the probe stays open: it reveals nothing
    with get_client(sync_client=True) as client:  # the run's own client: Prefect's settings carry the credential
        flow_id = client.create_flow_from_name("auth-check")
        # (the suite's Prefect harness may point every server at its own database: other flows can be listed too)
        assert flow_id in [flow.id for flow in client.read_flows()]
        assert client.read_flow(flow_id).name == "auth-check"


def test_the_credential_stays_off_command_lines_and_out_of_this_process_environment(run_api):
    from prefect.settings import PREFECT_API_AUTH_STRING

    url, pid, _ = run_api
    credential = PREFECT_API_AUTH_STRING.value()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert credential.encode() not in f.read()
    with open(f"/proc/{pid}/environ", "rb") as f:  # the server reads it from its environment
        assert f"{prefect_server.SERVER_AUTH_ENV}={credential}".encode() in f.read().split(b"\0")
    assert credential not in os.environ.values()  # the run's env servers and Ray workers never inherit it
    user, _, password = credential.partition(":")
    assert httpx.post(f"{url}/flows/filter", json={}, auth=(user, password), timeout=10).status_code == 200


def test_a_stranger_cannot_subscribe_to_the_run_events(run_api):
    """Prefect's websockets (the event stream) check the credential themselves, in their first message."""
    import json

    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    url = run_api[0].replace("http://", "ws://") + "/events/out"
    with pytest.raises(InvalidStatus):  # no credential at all: refused at the handshake
        connect(url, open_timeout=10)
    with connect(url, subprotocols=["prefect"], open_timeout=10) as socket:
        socket.send(json.dumps({"type": "auth", "token": "agentrl:guessed"}))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008  # policy violation: wrong credential
