"""A multi-node Ray cluster on this machine: a head and worker nodes, each its own `ray start`, with token auth.

For trying the Ray backend as a real cluster before there is one (deployments/ray_cluster.sh):

    python -m agentrl_core.distributed.local_cluster start [--node trainer:1 --node rollout:1 ...] [--port 6390]
    python -m agentrl_core.distributed.local_cluster add --node trainer:1   (e.g. after a node died)
    python -m agentrl_core.distributed.local_cluster status | stop

`start` runs a head node with no CPUs (it only hosts the GCS: nothing is scheduled there) and one worker node
per `--node ROLE:CPUS`, each with one unit of the custom resource `agentrl_<ROLE>`; a run with
distributed.trainer_resource=agentrl_trainer and distributed.rollout_resource=agentrl_rollout then puts its
trainer on the trainer node and its rollout workers on the rollout nodes. Each node is `ray start --block` in a
process group of its own, recorded in `<state>/cluster.json`; `stop` ends exactly those groups (SIGTERM, then
SIGKILL after a grace period), waits for them and removes the session folder: nothing of the cluster is left.

Authentication: a fresh token in `<state>/token` (mode 0600) that every node requires (RAY_AUTH_MODE=token,
RAY_AUTH_TOKEN_PATH); a client without it is refused. This matters here: in cluster mode Ray's GCS and raylets
listen on the machine's network address even when each node is given 127.0.0.1 (Ray's single-machine switch,
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, refuses a second node), so the token is what keeps other hosts out.
`<state>` is `$AGENTRL_HOME/ray-cluster` unless `--state` says otherwise; it and Ray's session folder (a
short path under the temporary folder: Ray's socket paths must fit 107 bytes) are private to this user (0700).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agentrl_core.system.atomic_file import write_text_atomic
from agentrl_core.errors import AgentRLError
from agentrl_core.web.ports import free_port

DEFAULT_PORT = 6390
"""The head's GCS port (not Ray's usual 6379, so a Ray the user runs already is not in the way)."""
NODE_START_S = 120.0
"""How long a node may take to register with the GCS (Ray's RAY_raylet_start_wait_time_s, 30 s by default)."""
NODE_START_TRIES = 3
"""How often a worker node that exits while starting is started again with fresh ports (a port chosen free can be
taken by another process before the node binds it)."""
LOG_TAIL_LINES = 20
"""How many of a failed node's last log lines its error shows."""
STOP_GRACE_S = 60.0
"""How long a node gets to exit after SIGTERM (the GCS drains first) before its group is killed."""
NODE_PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                   "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port")
"""Ports each node gets its own free one of: Ray's defaults collide when several nodes share a machine."""


class ClusterError(AgentRLError):
    """The local cluster could not be started, reached or stopped as asked."""


class NodeExited(ClusterError):
    """A node's process ended before the cluster reported it alive."""


@dataclass(frozen=True)
class NodeSpec:
    """A worker node: its role (the custom resource `agentrl_<role>`) and its logical CPUs."""

    role: str
    cpus: int

    @classmethod
    def parse(cls, text: str) -> NodeSpec:
        role, _, cpus = text.partition(":")
        if not role.isidentifier() or not cpus.isdigit() or int(cpus) < 1:
            raise argparse.ArgumentTypeError(f"a node is ROLE:CPUS, e.g. trainer:1 or rollout:2; got {text!r}")
        return cls(role, int(cpus))

    @property
    def resource(self) -> str:
        return f"agentrl_{self.role}"


@dataclass
class ClusterState:
    """What `start` recorded: the address, the token file and each node's process group."""

    address: str
    token_file: str
    session_dir: str
    nodes: list[dict]

    @classmethod
    def load(cls, state: Path) -> ClusterState:
        path = state / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster recorded in {state} (start one with `deployments/ray_cluster.sh start`)")
        return cls(**json.loads(path.read_text()))

    def save(self, state: Path) -> None:
        write_text_atomic(state / "cluster.json", json.dumps(asdict(self), indent=2))


def default_state_dir() -> Path:
    from agentrl_core.system.home import agentrl_home

    return agentrl_home() / "ray-cluster"



def node_environment(token_file: Path) -> dict[str, str]:
    """The environment of every node: token authentication from `token_file`, multi-node mode on."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1",
               RAY_USAGE_STATS_ENABLED="0")
    env.setdefault("RAY_raylet_start_wait_time_s", str(int(NODE_START_S)))  # Ray's 30 s is short on a busy machine
    return env


def ray_start_args(address: str | None, port: int, cpus: int, resources: dict[str, float], temp_dir: Path) -> list[str]:
    """`ray start --block` for the head (address None) or a worker node joining `address`."""
    exe = Path(sys.executable).with_name("ray")
    args = [str(exe) if exe.exists() else "ray", "start", "--block", "--node-ip-address", "127.0.0.1",
            "--num-cpus", str(cpus), "--resources", json.dumps(resources), "--disable-usage-stats"]
    if address is None:
        args += ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", str(temp_dir),
                 "--ray-client-server-port", str(free_port())]
    else:
        args += ["--address", address]
    for flag, port_ in zip(NODE_PORT_FLAGS, distinct_free_ports(len(NODE_PORT_FLAGS)), strict=True):
        args += [flag, str(port_)]
    return args


def distinct_free_ports(n: int) -> list[int]:
    """`n` different ports free on 127.0.0.1 now (the kernel may hand one port out twice in a row)."""
    ports: list[int] = []
    while len(ports) < n:
        candidate = free_port()
        if candidate not in ports:
            ports.append(candidate)
    return ports


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a node's log, for an error message ('' when there is no log)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_node(args: list[str], env: dict[str, str], log: Path) -> int:
    """Start one node in a process group of its own; returns its pid (= its process group id)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc.pid


def wait_for_port(port: int, pid: int, timeout_s: float, log: Path) -> None:
    """Wait until something accepts on 127.0.0.1:port; ClusterError if the node exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            raise ClusterError(f"the head node exited while starting; see {log}; its last lines:\n{log_tail(log)}")
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise ClusterError(f"the head's GCS did not accept on 127.0.0.1:{port} within {timeout_s:g} s; see {log}")


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie of ours counts as gone)."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    except ChildProcessError:
        pass  # not our child (a later `stop` in another process): ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def new_token(state: Path) -> Path:
    """A fresh token in `<state>/token`, created readable by this user only."""
    path = state / "token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def start(state: Path, nodes: list[NodeSpec], port: int = DEFAULT_PORT, timeout_s: float = 120.0) -> ClusterState:
    """Start the head and `nodes`; returns the recorded state once every node has joined."""
    if (state / "cluster.json").exists():
        raise ClusterError(f"a cluster is already recorded in {state}: stop it first (`deployments/ray_cluster.sh stop`)")
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state, 0o700)
    token = new_token(state)
    env = node_environment(token)
    session = Path(tempfile.mkdtemp(prefix="agentrl-rc-")) / "ray"  # 0700; short: Ray's socket paths must fit 107 bytes
    address = f"127.0.0.1:{port}"
    head_log = state / "head.log"
    head = start_node(ray_start_args(None, port, 0, {"agentrl_head": 1.0}, session), env, head_log)
    record = ClusterState(address, str(token), str(session), [{"role": "head", "pid": head, "log": str(head_log)}])
    record.save(state)
    try:
        wait_for_port(port, head, timeout_s, head_log)
        add_nodes(state, record, nodes, timeout_s)
    except BaseException:
        stop(state)
        raise
    return record


def add(state: Path, nodes: list[NodeSpec], timeout_s: float = 120.0) -> ClusterState:
    """Start `nodes` into the cluster recorded in `state` (e.g. a trainer node again after one died)."""
    record = ClusterState.load(state)
    add_nodes(state, record, nodes, timeout_s)
    return record


def add_nodes(state: Path, record: ClusterState, nodes: list[NodeSpec], timeout_s: float) -> None:
    """Start each node joining `record.address`, record it, and wait until the cluster reports it alive."""
    for node in nodes:  # one at a time: several raylets registering at once time out on a busy machine
        log = state / f"node-{len(record.nodes) - 1}-{node.role}.log"
        for attempt in range(1, NODE_START_TRIES + 1):
            started = start_worker_node(state, record, node, log)
            try:
                wait_for_node(record, started, timeout_s)
                break
            except NodeExited:
                forget_node(state, record, started)
                if attempt == NODE_START_TRIES:
                    raise ClusterError(f"node {node.role} exited while starting, {attempt} times with fresh ports; "
                                       f"see {log}; its last lines:\n{log_tail(log)}") from None
                with open(log, "a") as out:
                    out.write(f"\n[agentrl] the node exited while starting (try {attempt}); starting it again\n")


def start_worker_node(state: Path, record: ClusterState, node: NodeSpec, log: Path) -> dict:
    """Start `node` joining `record.address` with fresh ports, and record its process group."""
    env = node_environment(Path(record.token_file))
    port = int(record.address.rsplit(":", 1)[1])
    args = ray_start_args(record.address, port, node.cpus, {node.resource: 1.0}, Path(record.session_dir))
    manager = int(args[args.index("--node-manager-port") + 1])
    started = {"role": node.role, "pid": start_node(args, env, log), "log": str(log), "cpus": node.cpus,
               "node_manager_port": manager}
    record.nodes.append(started)
    record.save(state)
    return started


def forget_node(state: Path, record: ClusterState, node: dict) -> None:
    """End whatever is left of a node that failed to start (its process group) and drop it from the record."""
    _signal_group(int(node["pid"]), signal.SIGKILL)
    alive(int(node["pid"]))  # reap it
    record.nodes.remove(node)
    record.save(state)


def wait_for_node(record: ClusterState, node: dict, timeout_s: float) -> None:
    """Wait until the cluster reports `node` (by its node-manager port) alive; NodeExited when its process
    exits first, ClusterError when time runs out (asked in short-lived client processes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(node["pid"]):
            raise NodeExited(f"node {node['role']} exited while starting; see {node['log']}")
        if node["node_manager_port"] in live_node_ports(record):
            return
        time.sleep(1.0)
    raise ClusterError(f"node {node['role']} did not join within {timeout_s:g} s; see {node['log']}; its last lines:\n"
                       f"{log_tail(Path(node['log']))}")


def live_node_ports(record: ClusterState) -> set[int]:
    """The node-manager ports of the nodes the cluster reports alive (none when it does not answer yet)."""
    code = ("import ray; ray.init(address=%r, log_to_driver=False); "
            "print(*[n['NodeManagerPort'] for n in ray.nodes() if n['Alive']])" % record.address)
    env = node_environment(Path(record.token_file))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return set()
    return {int(x) for x in lines[-1].split() if x.isdigit()}


def stop(state: Path, grace_s: float = STOP_GRACE_S) -> list[str]:
    """End every node `start` recorded in `state` (their process groups only), then remove the session folder
    and the record. Returns the roles of the nodes that had to be killed."""
    record = ClusterState.load(state)
    groups = [(n["role"], int(n["pid"])) for n in record.nodes]
    for _, pgid in reversed(groups):  # workers first, the head (GCS) last
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(g) or alive(g) for _, g in groups):
        time.sleep(0.5)
    killed = []
    for role, pgid in groups:
        if group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
            killed.append(role)
    for _, pgid in groups:
        alive(pgid)  # reap our own children
    shutil.rmtree(Path(record.session_dir).parent, ignore_errors=True)
    (state / "cluster.json").unlink(missing_ok=True)
    Path(record.token_file).unlink(missing_ok=True)
    return killed


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def status(state: Path) -> str:
    """One line per node: role, pid, alive or not; and how a run joins the cluster."""
    record = ClusterState.load(state)
    lines = [f"{n['role']:>8}: pid {n['pid']} {'running' if group_alive(int(n['pid'])) else 'gone'} (log {n['log']})"
             for n in record.nodes]
    return "\n".join([f"cluster at {record.address}, token {record.token_file}", *lines, join_hint(record)])


def join_hint(record: ClusterState) -> str:
    """The overrides that run a recipe on this cluster."""
    rollout = sum(1 for n in record.nodes if n["role"] == "rollout")
    return ("run on it: agentrl run household_grpo distributed.backend=ray "
            f"distributed.ray_address={record.address} distributed.ray_token_file={record.token_file} "
            "distributed.trainer_resource=agentrl_trainer distributed.rollout_resource=agentrl_rollout "
            f"distributed.rollout_workers={max(1, rollout)}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="ray_cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["start", "add", "stop", "status"])
    p.add_argument("--node", dest="nodes", type=NodeSpec.parse, action="append",
                   help="a worker node ROLE:CPUS (repeat); default: trainer:1 rollout:1 rollout:1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--state", type=Path, default=None, help="where the token, logs and record live")
    args = p.parse_args(argv)
    state = args.state or default_state_dir()
    try:
        if args.command == "start":
            nodes = args.nodes or [NodeSpec("trainer", 1), NodeSpec("rollout", 1), NodeSpec("rollout", 1)]
            record = start(state, nodes, args.port)
            print(f"started {len(record.nodes)} nodes at {record.address} (token in {record.token_file})")
            print(join_hint(record))
        elif args.command == "add":
            if not args.nodes:
                raise ClusterError("add needs at least one --node ROLE:CPUS")
            record = add(state, args.nodes)
            print(f"the cluster at {record.address} now has {len(record.nodes)} recorded nodes")
        elif args.command == "stop":
            killed = stop(state)
            print("stopped" + (f" (killed after {STOP_GRACE_S:g} s: {', '.join(killed)})" if killed else ""))
        else:
            print(status(state))
    except ClusterError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
