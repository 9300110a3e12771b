"""The Ray runtime of a run: join the configured cluster, or start a local Ray on 127.0.0.1 and stop it after.

A local Ray answers only the run: it is started with Ray's token authentication (RAY_AUTH_MODE=token) and a
fresh token per run, so its GCS, raylet, workers and agents refuse a caller without that token (a Ray that
accepted strangers would run their code as the run's user), and its session folder (sockets, logs, spilled
objects) lives in a folder only this user can enter. Joining an existing cluster (distributed.ray_address),
the cluster's token comes from distributed.ray_token_file (a file only its owner can read, as
`deployments/ray_cluster.sh` writes it) or the user's own setup: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
~/.ray/auth_token, read by Ray. The run's secret variables reach its workers through the object store
(agentrl_core.distributed.executor), never through the job's runtime env, which any client can list.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentrl_core.config import DistributedConfig
from agentrl_core.errors import ConfigError

log = logging.getLogger(__name__)
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's single-machine switch, read when `ray` is imported: "0" keeps every Ray server on 127.0.0.1.

Without it Ray 2.60 replaces _node_ip_address="127.0.0.1" by the machine's network address and its
GCS, raylet and workers listen on all interfaces (measured with `ss -ltnp`)."""
AUTH_MODE_ENV = "RAY_AUTH_MODE"
"""Ray's authentication switch ("token" or "disabled"), read by every Ray process from its environment."""
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
"""The token itself; Ray reads it before RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token."""
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
"""A file holding the token, read by Ray when RAY_AUTH_TOKEN is not set."""


def import_ray() -> Any:
    """`ray`, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ConfigError("distributed.backend=ray needs Ray: pip install 'ray==2.60.0' "
                          "(or set distributed.backend=local)") from err
    return ray


def loopback_only() -> None:
    """Make a local Ray started by this process bind 127.0.0.1 only (workers inherit the setting)."""
    if "ray" not in sys.modules:
        os.environ[LOOPBACK_ENV] = "0"
        return
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise ConfigError(f"ray was imported before a local Ray could be kept on 127.0.0.1; set {LOOPBACK_ENV}=0 "
                          "in the environment of this process, or point distributed.ray_address at a cluster")


@contextmanager
def ray_runtime(cfg: DistributedConfig, cpus_needed: float) -> Iterator[None]:
    """Ray for the duration of the block.

    Already initialised in this process (e.g. by a test or a notebook): used as is, left running.
    cfg.ray_address set: joined (with cfg.ray_token_file's token when set), disconnected after.
    Otherwise a local Ray on 127.0.0.1 only, no
    dashboard, requiring this run's token, with max(cores, cpus_needed) logical CPUs so the plan fits
    on a small machine (logical CPUs are scheduling slots, not pinned cores), shut down after.
    """
    if cfg.ray_address is None:
        loopback_only()
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    if cfg.ray_address is not None:
        with cluster_token(cfg.ray_token_file):
            ray.init(address=cfg.ray_address, include_dashboard=False)
            try:
                yield
            finally:
                ray.shutdown()
        return
    with run_token(), private_session_root() as root:
        try:
            _start_local(ray, cfg, cpus_needed, root)
            yield
        finally:
            ray.shutdown()


def _start_local(ray: Any, cfg: DistributedConfig, cpus_needed: float, root: str) -> None:
    """ray.init of a local Ray: 127.0.0.1 only, no dashboard, its session under `root`.

    address="local": a Ray of the run's own, always. With no address, ray.init joins the cluster RAY_ADDRESS
    names, or any Ray it finds running on the machine (another run's, a user's `ray start`), where the run's
    token is refused (a cluster is joined only through distributed.ray_address)."""
    store = cfg.object_store_mb * 1024**2 if cfg.object_store_mb else None
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=store,
             _temp_dir=root, num_cpus=max(os.cpu_count() or 1, int(-(-cpus_needed // 1))))
    log.info("started a local Ray on 127.0.0.1 (token authentication, session under %s): %s",
             root, ray.cluster_resources())


@contextmanager
def run_token() -> Iterator[None]:
    """Ray's token authentication with a fresh token, for a local Ray started in the block.

    Set in this process's environment, where the GCS, raylet and workers (children of this process)
    find it; never on a command line or in a file. Restored after, so a later `ray.init(address=...)`
    uses the user's own token setup again.
    """
    with _auth_environment({AUTH_MODE_ENV: "token", AUTH_TOKEN_ENV: secrets.token_hex(32)}):
        yield


@contextmanager
def cluster_token(path: str | None) -> Iterator[None]:
    """Ray's token authentication with the token in `path` for a cluster joined in the block (no change when
    None). The file must exist, hold a token and be readable by its owner only: a token others can read is
    everyone's key to the cluster."""
    if path is None:
        yield
        return
    file = Path(path).expanduser()
    check_token_file(file)
    with _auth_environment({AUTH_MODE_ENV: "token", AUTH_TOKEN_PATH_ENV: str(file.resolve()),
                            AUTH_TOKEN_ENV: None}):
        yield


def check_token_file(path: Path) -> None:
    """ConfigError unless `path` is a non-empty file that only its owner may read or write."""
    if not path.is_file():
        raise ConfigError(f"distributed.ray_token_file={path} does not exist; start the cluster with "
                          "`bash deployments/ray_cluster.sh start`, which writes it, or point the setting at your token")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ConfigError(f"distributed.ray_token_file={path} can be read or written by others (mode {mode:o}): "
                          f"`chmod 600 {path}`, and start the cluster again with a new token if it was shared")
    if not path.read_text().strip():
        raise ConfigError(f"distributed.ray_token_file={path} is empty")


@contextmanager
def _auth_environment(values: dict[str, str | None]) -> Iterator[None]:
    """These RAY_AUTH_* variables (None: unset) for the block, seen by this process's Ray; restored after."""
    saved = {name: os.environ.get(name) for name in values}
    _set_environment(values)
    _reload_ray_auth()
    try:
        yield
    finally:
        _set_environment(saved)
        _reload_ray_auth()


def _set_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _reload_ray_auth() -> None:
    """Make this process's Ray see the current RAY_AUTH_* variables.

    Ray reads them in C++ once per process and caches both the mode (its config) and the token (its
    token loader): without a reload a second run in the same process, or a process that touched Ray
    before, would connect to its own new Ray without the token, or with the last run's, and be refused.
    These are the calls Ray's own `ray.init` makes when it turns token authentication on.
    """
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError as err:
        raise ConfigError("token authentication of the local Ray needs Ray >= 2.52: pip install 'ray==2.60.0'") from err
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextmanager
def private_session_root() -> Iterator[str]:
    """A folder for the local Ray's session (sockets, logs, spilled objects) that only this user can reach.

    Ray makes every folder it creates there writable by everyone (0777, `try_to_create_directory`, "so
    others can use it"), /tmp/ray included: another local user could replace what the run's workers
    read. So Ray gets a folder inside a 0700 one, which nobody else can enter. Removed after a run that
    ended normally; kept (and named in the log) after a failure, for Ray's logs.
    """
    private = tempfile.mkdtemp(prefix="agentrl-ray-")  # mode 0700
    try:
        yield os.path.join(private, "ray")
    except BaseException:
        log.warning("the local Ray's logs of this run are kept in %s", private)
        raise
    shutil.rmtree(private, ignore_errors=True)
