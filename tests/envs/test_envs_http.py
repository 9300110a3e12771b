"""Over real HTTP: a server subprocess on 127.0.0.1, check_env through RemoteEnv, AgentGym clients, launch errors."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.envs.conftest import every_env

from agentrl_core.envs import check_env
from agentrl_core.env_service import EnvClient, RemoteEnv, ServerProcess, launch_server
from agentrl_core.envs.errors import EnvServerUnavailable, ServerStartError


@pytest.mark.slow
@pytest.mark.parametrize("name", every_env())
def test_check_env_over_http(client: EnvClient, name: str) -> None:
    env = RemoteEnv(client, name)
    check_env(env)
    assert client.health()["sessions"] == 0  # close() deleted the session


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a LISTEN socket on `port`, from /proc/net/tcp (IPv4)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_server_binds_loopback_by_default(server: ServerProcess) -> None:
    assert server.host == "127.0.0.1" and server.url == f"http://127.0.0.1:{server.port}"
    if Path("/proc/net/tcp").exists():
        assert _listening_addresses(server.port or 0) == {"127.0.0.1"}


def test_agentgym_client_flow(server: ServerProcess) -> None:
    """What AgentGym's AlfWorldEnvClient does, with env_server_base=<url>/household."""
    base = f"{server.url}/household"
    with httpx.Client(timeout=10) as http:
        gid = http.post(f"{base}/create").json()["id"]
        reset = http.post(f"{base}/reset", json={"id": gid, "game": 10_001, "world_type": "Text"})
        assert reset.status_code == 200 and reset.json()["available_actions"]
        action = reset.json()["available_actions"][0]
        step = http.post(f"{base}/step", json={"id": gid, "action": action}).json()
        assert step["done"] is False and step["reward"] == 0.0
        assert http.get(f"{base}/observation", params={"id": gid}).json() == step["observation"]
        assert http.get(f"{base}/available_actions", params={"id": gid}).json() == step["available_actions"]
        assert http.post(f"{base}/close", json={"id": gid}).status_code == 200
        gone = http.post(f"{base}/step", json={"id": gid, "action": "look"})
        assert gone.status_code == 404 and gone.json()["error"] == "SessionNotFoundError"


def test_single_env_server_answers_agentgym_at_the_root() -> None:
    with launch_server(["countdown"]) as srv, httpx.Client(base_url=srv.url, timeout=10) as http:
        assert http.get("/health").json()["envs"] == ["countdown"]
        gid = http.post("/create").json()["id"]
        obs = http.post("/reset", json={"id": gid, "data_idx": 5000}).json()["observation"]
        assert "Target:" in obs
        step = http.post("/step", json={"id": gid, "action": "<answer>1</answer>"}).json()
        assert step["done"] is False and step["available_actions"] == []
        assert http.post("/close", json={"id": gid}).json()["closed"] is True
        assert http.post("/household/create").status_code == 404  # not hosted here


def test_stop_is_idempotent_and_the_client_then_fails_cleanly() -> None:
    srv = launch_server(["countdown"])
    url, pid = srv.url, srv.pid
    assert srv.alive and pid > 0
    srv.stop()
    srv.stop()
    assert not srv.alive
    with EnvClient(url, timeout=2.0, retries=1, backoff=0.0) as client, pytest.raises(EnvServerUnavailable):
        client.health()


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            launch_server(["countdown"], port=port)


def test_startup_failure_reports_the_server_output() -> None:
    with pytest.raises(ServerStartError, match="unknown environment 'nope'"):
        launch_server(["nope"])
