"""The local Ray a run starts answers only the run: Ray's token authentication with a fresh token per run.

Marked slow: a local Ray (~5 s) and three processes that each import Ray and try to join it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by `import ray`: keeps the local Ray on 127.0.0.1
ray = pytest.importorskip("ray")
grpc = pytest.importorskip("grpc")
pytestmark = [pytest.mark.slow, pytest.mark.ray]

from agentrl_core.config import DistributedConfig
from agentrl_core.distributed.cluster import AUTH_MODE_ENV, AUTH_TOKEN_ENV, ray_runtime
from agentrl_core.web.ports import free_port

STRANGER_S = 90.0
"""Bound on one stranger's attempt (a refusal takes a few seconds: Ray retries the GCS twice, below)."""
JOIN = "import ray; ray.init(address={address!r}); print('JOINED', ray.cluster_resources())"


def _stranger(address: str, home: Path, **auth: str) -> subprocess.Popen[str]:
    """Another local user's process joining `address`: its own HOME (no ~/.ray/auth_token of ours), none of
    our Ray variables but `auth`; two GCS connection attempts instead of Ray's twenty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_gcs_server_port_wait_time_s="2", **auth)
    return subprocess.Popen([sys.executable, "-c", JOIN.format(address=address)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _outcome(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=STRANGER_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out + err


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray as a run starts it, HOME pointed at an empty folder to see what Ray writes there, and
    the user's RAY_AUTH_MODE=disabled (meant for their other clusters) in the environment: (GCS address,
    the run's token, that HOME). RAY_ADDRESS names another cluster (nothing listens there): the run's Ray is
    its own all the same, never one it would find and join."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.delenv(AUTH_TOKEN_ENV, raising=False)
        mp.setenv(AUTH_MODE_ENV, "disabled")
        mp.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
        with ray_runtime(DistributedConfig(backend="ray", object_store_mb=100), cpus_needed=1):
            session = Path(ray._private.worker._global_node.get_session_dir_path())
            yield ray.get_runtime_context().gcs_address, os.environ[AUTH_TOKEN_ENV], home
        assert AUTH_TOKEN_ENV not in os.environ and os.environ[AUTH_MODE_ENV] == "disabled"  # restored after
        assert not session.parent.parent.exists()  # the private folder is removed after a normal end


def test_strangers_without_the_token_are_refused_and_the_run_workers_work(local_ray, tmp_path):
    address, token, _ = local_ray
    none = _stranger(address, tmp_path)  # started together: their refusals overlap in time
    wrong = _stranger(address, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
    holder = _stranger(address, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # the control: same path
    same_token = ray.get(ray.remote(lambda: os.environ.get(AUTH_TOKEN_ENV)).remote(), timeout=120)
    assert same_token == token  # the run's own worker joined: it holds the run's token
    for proc in (none, wrong):
        code, text = _outcome(proc)
        assert code != 0 and "JOINED" not in text, text[-2000:]
        assert "AuthenticationError" in text or "Unauthenticated" in text, text[-2000:]
    code, text = _outcome(holder)
    assert code == 0 and "JOINED" in text, text[-2000:]  # so the refusals above are the token's doing


def _own_port() -> int:
    """The gRPC port of the calling Ray process's core worker (the server a task is pushed to)."""
    from ray.core.generated import common_pb2

    worker = ray._private.worker.global_worker
    return common_pb2.Address.FromString(worker.core_worker.get_owner_address(ray.put(0))).port


def _status(target: str, call: str, token: str | None) -> grpc.StatusCode:
    """The status of one raw gRPC call (`Service.Method` of Ray's protos, empty request) to `target`."""
    from ray.core.generated import core_worker_pb2, core_worker_pb2_grpc, gcs_service_pb2, gcs_service_pb2_grpc
    from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

    service, method = call.split(".")
    stubs = {"InternalKVGcsService": (gcs_service_pb2_grpc, gcs_service_pb2.InternalKVGetRequest(key=b"x")),
             "NodeManagerService": (node_manager_pb2_grpc, node_manager_pb2.GetNodeStatsRequest()),
             "CoreWorkerService": (core_worker_pb2_grpc, core_worker_pb2.NumPendingTasksRequest())}
    module, request = stubs[service]
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(target) as channel:
        try:
            getattr(getattr(module, f"{service}Stub")(channel), method)(request, metadata=metadata, timeout=20)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_every_ray_server_refuses_a_raw_call_without_the_token(local_ray):
    address, token, _ = local_ray
    (node,) = ray.nodes()
    servers = {"GCS": (address, "InternalKVGcsService.InternalKVGet"),
               "raylet": (f"127.0.0.1:{node['NodeManagerPort']}", "NodeManagerService.GetNodeStats"),
               "a worker (runs the tasks pushed to it)": (f"127.0.0.1:{ray.get(ray.remote(_own_port).remote())}",
                                                          "CoreWorkerService.NumPendingTasks")}
    for name, (target, call) in servers.items():
        assert _status(target, call, None) == grpc.StatusCode.UNAUTHENTICATED, name
        assert _status(target, call, "0" * 64) == grpc.StatusCode.UNAUTHENTICATED, name
        assert _status(target, call, token) == grpc.StatusCode.OK, name  # the control: the call itself is fine


def test_the_token_is_fresh_and_lives_in_no_file_or_command_line(local_ray):
    address, token, home = local_ray
    assert len(token) == 64
    assert not (home / ".ray" / "auth_token").exists()  # Ray's default would write ~/.ray/auth_token
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                assert token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    leaks = [p for p in session.rglob("*") if p.is_file() and not p.is_socket() and token.encode() in p.read_bytes()]
    assert leaks == []


def test_the_session_folder_is_out_of_other_users_reach(local_ray):
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    private = session.parent.parent  # Ray's own folders below it are 0777 (Ray makes them so)
    assert private.name.startswith("agentrl-ray-") and stat.S_IMODE(private.stat().st_mode) == 0o700
    assert private.stat().st_uid == os.getuid()
