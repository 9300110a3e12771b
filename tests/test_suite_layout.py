"""How the suite runs in parallel (tests/conftest.py): which tests share a worker, and one thread per worker."""

from __future__ import annotations

import os

import pytest

from tests.conftest import xdist_group_of

SHARED_SERVER = "tests/flows/test_deployment.py::test_nightly_eval_is_scheduled_at_two"  # uses the module's stack
ON_RAY = "tests/distributed/test_ray_actors.py::test_the_local_ray_listens_on_loopback_only"  # the package's Ray


def _collected(request: pytest.FixtureRequest, nodeid: str) -> pytest.Item:
    items = {item.nodeid.split("@")[0]: item for item in request.session.items}  # xdist appends "@group"
    if nodeid not in items:
        pytest.skip(f"{nodeid} is not collected in this run (run the whole suite)")
    return items[nodeid]


def test_tests_sharing_a_module_fixture_or_a_ray_run_in_one_group(request: pytest.FixtureRequest) -> None:
    assert xdist_group_of(_collected(request, SHARED_SERVER)) == "tests/flows/test_deployment.py"
    assert xdist_group_of(_collected(request, ON_RAY)) == "ray"
    assert xdist_group_of(request.node) is None  # a test with no shared fixture goes to any worker


def test_a_parallel_worker_and_what_it_starts_use_one_thread() -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not a parallel worker (-n 0)")
    import torch

    from agentrl_core.models.compute_settings import resolve_threads

    assert os.environ["OMP_NUM_THREADS"] == "1" and resolve_threads("auto") == 1
    assert torch.get_num_threads() == 1


@pytest.fixture(scope="module")
def module_resource() -> object:
    return object()


def test_a_test_sharing_a_module_fixture_carries_its_group_to_xdist(request: pytest.FixtureRequest,
                                                                     module_resource: object) -> None:
    """xdist's loadgroup reads the group from the node id's "@group" suffix (pytest 9.2 broke that: pinned)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("not a parallel worker (-n 0)")
    assert request.node.nodeid.endswith("@tests/test_suite_layout.py"), request.node.nodeid
