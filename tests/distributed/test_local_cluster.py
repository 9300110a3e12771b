"""The multi-node Ray cluster on one machine (deployments/ray_cluster.sh): its pieces, and a run placed on it.

The end-to-end test is slow (~2 min): a head and two worker nodes, each its own `ray start`; strangers
without the cluster's token refused; a GRPO step whose trainer and rollout worker land on the nodes named by
their custom resources, the run's secrets reaching the other nodes without showing in Ray's metadata; and
`stop` leaving no process of the cluster behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_core.distributed import local_cluster as lc
from agentrl_core.errors import ConfigError
from agentrl_core.web.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NODE_DEATH_CHECKS = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                     "RAY_health_check_timeout_ms": "5000", "RAY_health_check_failure_threshold": "5"}
"""Ray's GCS health checks of the nodes, for the test's cluster: a killed node is declared dead after about
5 s (five refused checks a second apart) instead of Ray's ~15-20 s (every 3 s, five times, after 5 s), while
a live node on a busy machine still gets 5 s to answer each check."""


def test_node_specs_and_the_arguments_of_each_node() -> None:
    assert lc.NodeSpec.parse("rollout:2") == lc.NodeSpec("rollout", 2)
    assert lc.NodeSpec("trainer", 1).resource == "agentrl_trainer"
    for bad in ("rollout", "rollout:0", ":1", "roll out:1", "rollout:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="ROLE:CPUS"):
            lc.NodeSpec.parse(bad)
    head = lc.ray_start_args(None, 6390, 0, {"agentrl_head": 1.0}, Path("/tmp/s"))
    with _bound(int(head[head.index(flag) + 1]) for flag in lc.NODE_PORT_FLAGS):  # the head runs: its ports taken
        node = lc.ray_start_args("127.0.0.1:6390", 6390, 1, {"agentrl_rollout": 1.0}, Path("/tmp/s"))
    assert head[1:3] == ["start", "--block"] and node[1:3] == ["start", "--block"]
    assert "--head" in head and head[head.index("--port") + 1] == "6390" and "--address" not in head
    assert node[node.index("--address") + 1] == "127.0.0.1:6390" and "--head" not in node
    assert json.loads(node[node.index("--resources") + 1]) == {"agentrl_rollout": 1.0}
    ports = [int(args[args.index(flag) + 1]) for args in (head, node) for flag in lc.NODE_PORT_FLAGS]
    assert len(set(ports)) == len(ports)  # nodes sharing a machine each get their own ports


@contextlib.contextmanager
def _bound(ports):
    """Hold `ports` bound on 127.0.0.1, as a started node does (a port free but unbound may be handed out again)."""
    with contextlib.ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", port))
        yield


def test_a_token_file_must_be_private_and_hold_a_token(tmp_path: Path) -> None:
    from agentrl_core.distributed.cluster import AUTH_MODE_ENV, AUTH_TOKEN_PATH_ENV, check_token_file, cluster_token

    path = tmp_path / "token"
    with pytest.raises(ConfigError, match="does not exist; start the cluster"):
        check_token_file(path)
    path.write_text("abc")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="can be read or written by others \\(mode 644\\): `chmod 600"):
        check_token_file(path)
    path.chmod(0o600)
    path.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        check_token_file(path)
    token = lc.new_token(tmp_path)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    before = {k: os.environ.get(k) for k in (AUTH_MODE_ENV, AUTH_TOKEN_PATH_ENV)}
    with cluster_token(str(token)):
        assert os.environ[AUTH_MODE_ENV] == "token" and os.environ[AUTH_TOKEN_PATH_ENV] == str(token.resolve())
    assert {k: os.environ.get(k) for k in before} == before  # restored after


def _fake_nodes(monkeypatch: pytest.MonkeyPatch, tries_file: Path, exits: int) -> None:
    """Nodes whose first `exits` starts end at once with a port error (as a raylet whose port was taken does);
    later ones say `running` and run until stopped; the cluster reports alive exactly the running ones."""
    code = ("import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0) + 1; "
            "p.write_text(str(n)); print('try', n, flush=True); "
            f"sys.exit('bind: Address already in use') if n <= {exits} else print('running', flush=True); "
            "time.sleep(600)")
    tries_file.write_text("")

    def fake_args(address, port, cpus, resources, temp_dir):  # noqa: ANN001, ANN202
        ports = lc.distinct_free_ports(len(lc.NODE_PORT_FLAGS))
        return [sys.executable, "-c", code, str(tries_file),
                *[x for flag, q in zip(lc.NODE_PORT_FLAGS, ports, strict=True) for x in (flag, str(q))]]

    def fake_live(record: lc.ClusterState) -> set[int]:
        return {n["node_manager_port"] for n in record.nodes[1:]
                if lc.alive(n["pid"]) and Path(n["log"]).read_text().endswith("running\n")}

    monkeypatch.setattr(lc, "ray_start_args", fake_args)
    monkeypatch.setattr(lc, "live_node_ports", fake_live)


def test_a_node_that_exits_while_starting_is_started_again_with_fresh_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tries = tmp_path / "tries"
    _fake_nodes(monkeypatch, tries, exits=1)
    record = lc.ClusterState("127.0.0.1:1", str(tmp_path / "token"), str(tmp_path / "s" / "ray"),
                             [{"role": "head", "pid": os.getpid(), "log": ""}])
    lc.add_nodes(tmp_path, record, [lc.NodeSpec("rollout", 1)], timeout_s=30)
    try:
        assert tries.read_text() == "2" and len(record.nodes) == 2  # the failed start is gone from the record
        (node,) = lc.ClusterState.load(tmp_path).nodes[1:]
        assert lc.alive(node["pid"]) and "starting it again" in Path(node["log"]).read_text()
    finally:
        lc._signal_group(record.nodes[1]["pid"], lc.signal.SIGKILL)
        lc.alive(record.nodes[1]["pid"])


@pytest.mark.slow
def test_a_node_that_keeps_exiting_fails_with_the_end_of_its_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tries = tmp_path / "tries"
    _fake_nodes(monkeypatch, tries, exits=lc.NODE_START_TRIES)
    record = lc.ClusterState("127.0.0.1:1", str(tmp_path / "token"), str(tmp_path / "s" / "ray"),
                             [{"role": "head", "pid": os.getpid(), "log": ""}])
    with pytest.raises(lc.ClusterError, match=f"exited while starting, {lc.NODE_START_TRIES} times") as err:
        lc.add_nodes(tmp_path, record, [lc.NodeSpec("trainer", 1)], timeout_s=30)
    assert "Address already in use" in str(err.value) and f"try {lc.NODE_START_TRIES}" in str(err.value)
    assert len(record.nodes) == 1 and tries.read_text() == str(lc.NODE_START_TRIES)


def _stranger(address: str, home: Path, **auth: str) -> subprocess.CompletedProcess[str]:
    """A process of someone without the cluster's token joining it (its own HOME, none of our RAY_ variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_gcs_server_port_wait_time_s="2", **auth)
    code = f"import ray; ray.init(address={address!r}); print('JOINED', ray.cluster_resources())"
    return subprocess.run([sys.executable, "-c", code], env=env, text=True, capture_output=True, timeout=120,
                          check=False)


def _driver_env() -> dict[str, str]:
    """The environment of a user's shell: no Ray switches of this test process (its imports set some)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _drive(model: Path, root: Path, record: lc.ClusterState, *kill: str) -> tuple[int, str, dict | None]:
    """A 3-step run on the cluster from a process of its own (kill: step and role whose raylet dies after it)."""
    run = subprocess.run([sys.executable, str(ROOT / "bench/cluster_driver.py"), str(model), str(root),
                          record.address, record.token_file, "3", *kill],
                         env=_driver_env(), text=True, capture_output=True, timeout=900, check=False)
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    return run.returncode, run.stdout + run.stderr, json.loads(lines[-1][len("RESULT "):]) if lines else None


@pytest.mark.slow
@pytest.mark.ray
def test_a_run_on_a_cluster_is_placed_by_resources_keeps_strangers_out_and_survives_its_nodes(
        tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placement, strangers and secrets; a rollout node killed mid-run (the run goes on, its worker re-placed);
    the trainer's node killed (the run stops saying so, and the same run resumes once a trainer node is back,
    losing no more than one checkpoint interval); `stop` leaves nothing."""
    pytest.importorskip("ray")
    for name, value in NODE_DEATH_CHECKS.items():  # the nodes inherit them (local_cluster.node_environment)
        monkeypatch.setenv(name, value)
    state = tmp_path / "cluster"
    nodes = [lc.NodeSpec("trainer", 1), lc.NodeSpec("rollout", 1), lc.NodeSpec("rollout", 1)]
    record = lc.start(state, nodes, port=free_port())
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700 and len(record.nodes) == 4
        assert stat.S_IMODE(Path(record.token_file).stat().st_mode) == 0o600
        refused = _stranger(record.address, tmp_path)
        assert refused.returncode != 0 and "JOINED" not in refused.stdout, refused.stderr[-2000:]
        wrong = _stranger(record.address, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
        assert wrong.returncode != 0 and "JOINED" not in wrong.stdout, wrong.stderr[-2000:]
        code, out, moved = _drive(tiny_model_path, tmp_path / "runs-a", record, "1", "rollout")
        assert code == 0 and moved, out[-4000:]
        code, out, _ = _drive(tiny_model_path, tmp_path / "runs-b", record, "2", "trainer")
        assert code == 3 and "FAILED TrainerDied: the trainer worker died" in out, out[-4000:]
        assert "start the stage again to resume" in out
        lc.add(state, [lc.NodeSpec("trainer", 1)])  # a trainer node again
        code, out, resumed = _drive(tiny_model_path, tmp_path / "runs-b", record)
        assert code == 0 and resumed, out[-4000:]
        groups = [int(n["pid"]) for n in lc.ClusterState.load(state).nodes]
    finally:
        lc.stop(state, grace_s=90)
    assert moved["steps"] == 3 and Path(moved["checkpoint"]).name == "step_000003"
    first, last = moved["placements"][0], moved["placements"][-1]
    (trainer_node, *trainer_res), = first["agentrl-trainer"]
    (rollout_node, *rollout_res), = first["agentrl-rollout"]
    assert trainer_res == ["agentrl_trainer"] and rollout_res == ["agentrl_rollout"]  # placed by their resources
    (moved_node, *moved_res), = last["agentrl-rollout"]
    assert moved_res == ["agentrl_rollout"] and moved_node != rollout_node  # re-placed on the rollout node left
    assert last["agentrl-trainer"][0][0] == trainer_node
    assert moved["leaked"] == [False, False, False]  # the env server's token reached the rollout nodes, not metadata
    assert resumed["resumed_from"] == 2 and resumed["steps"] == 3  # checkpoint every step: nothing lost
    assert resumed["placements"][0]["agentrl-trainer"][0][1:] == ["agentrl_trainer"]
    assert not any(lc.group_alive(g) for g in groups)  # nothing of the cluster is left
    assert not Path(record.session_dir).parent.exists() and not (state / "cluster.json").exists()
