"""One local Ray for the Ray-executor tests of this package (127.0.0.1, 4 CPUs, a 200 MiB store), started by the
first test that asks and shut down after the package; a driver run inside finds it and reuses it."""

from __future__ import annotations

import os

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by `import ray`: keeps the local Ray on 127.0.0.1


@pytest.fixture(scope="package")
def local_ray():
    ray = pytest.importorskip("ray")
    from agentrl_core.config import DistributedConfig
    from agentrl_core.distributed.cluster import ray_runtime

    with ray_runtime(DistributedConfig(backend="ray", object_store_mb=200), cpus_needed=4):
        yield ray
    assert not ray.is_initialized()
