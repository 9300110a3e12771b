"""The Ray runtime of a run: join the configured cluster, or start a local Ray on 127.0.0.1 and stop it after.

A local Ray answers only the run: it is started with Ray's token authentication (RAY_AUTH_MODE=token) and a
fresh token per run, so its GCS, raylet, workers and agents refuse a caller without that token (a Ray that
accepted strangers would run their code as the run's user), and its session folder (sockets, logs, spilled
objects) lives in a folder only this user can enter. Joining an existing cluster (distributed.ray_address),
the user's own token setup applies: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, read by Ray.
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
def ray_runtime(cfg: DistributedConfig, cpus_needed: float, env_vars: dict[str, str] | None = None) -> Iterator[None]:
    """Ray for the duration of the block; `env_vars` (the run's bearer token and secret variables,
    `secrets.worker_environment`) reach every worker through the job's runtime env, on every node.

    Already initialised in this process (e.g. by a test or a notebook): used as is, left running.
    cfg.ray_address set: joined, disconnected after. Otherwise a local Ray on 127.0.0.1 only, no
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
        ray.init(address=cfg.ray_address, include_dashboard=False, runtime_env=_runtime_env(env_vars))
        try:
            yield
        finally:
            ray.shutdown()
        return
    with run_token(), private_session_root() as root:
        try:
            _start_local(ray, cfg, cpus_needed, env_vars, root)
            yield
        finally:
            ray.shutdown()


def _start_local(ray: Any, cfg: DistributedConfig, cpus_needed: float, env_vars: dict[str, str] | None,
                 root: str) -> None:
    """ray.init of a local Ray: 127.0.0.1 only, no dashboard, its session under `root`."""
    store = cfg.object_store_mb * 1024**2 if cfg.object_store_mb else None
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=store,
             runtime_env=_runtime_env(env_vars), _temp_dir=root,
             num_cpus=max(os.cpu_count() or 1, int(-(-cpus_needed // 1))))
    log.info("started a local Ray on 127.0.0.1 (token authentication, session under %s): %s",
             root, ray.cluster_resources())


@contextmanager
def run_token() -> Iterator[None]:
    """Ray's token authentication with a fresh token, for a local Ray started in the block.

    Set in this process's environment, where the GCS, raylet and workers (children of this process)
    find it; never on a command line or in a file. Restored after, so a later `ray.init(address=...)`
    uses the user's own token setup again.
    """
    saved = {name: os.environ.get(name) for name in (AUTH_MODE_ENV, AUTH_TOKEN_ENV)}
    os.environ.update({AUTH_MODE_ENV: "token", AUTH_TOKEN_ENV: secrets.token_hex(32)})
    _reload_ray_auth()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _reload_ray_auth()


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


def _runtime_env(env_vars: dict[str, str] | None) -> dict[str, object] | None:
    """Ray's job runtime env carrying `env_vars` to the workers (None when there are none)."""
    return {"env_vars": dict(env_vars)} if env_vars else None
