"""The Ray runtime of a run: join the configured cluster, or start a local Ray on 127.0.0.1 and stop it after."""

from __future__ import annotations

import logging
import os
import sys
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
    dashboard, with max(cores, cpus_needed) logical CPUs so the plan fits on a small machine
    (logical CPUs are scheduling slots, not pinned cores), shut down after.
    """
    if cfg.ray_address is None:
        loopback_only()
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    if cfg.ray_address is not None:
        ray.init(address=cfg.ray_address, include_dashboard=False, runtime_env=_runtime_env(env_vars))
    else:
        store = cfg.object_store_mb * 1024**2 if cfg.object_store_mb else None
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=store,
                 runtime_env=_runtime_env(env_vars),
                 num_cpus=max(os.cpu_count() or 1, int(-(-cpus_needed // 1))))
        log.info("started a local Ray on 127.0.0.1: %s", ray.cluster_resources())
    try:
        yield
    finally:
        ray.shutdown()


def _runtime_env(env_vars: dict[str, str] | None) -> dict[str, object] | None:
    """Ray's job runtime env carrying `env_vars` to the workers (None when there are none)."""
    return {"env_vars": dict(env_vars)} if env_vars else None
