"""How many parallel workers `-n auto` starts: bounded by the cores, the memory and the free temporary disk."""

from __future__ import annotations

import os

import pytest

from agentrl_core.system import diskfull, machine_info
from tests.conftest import WORKER_DISK_GIB, WORKER_MEMORY_GIB, pytest_xdist_auto_num_workers


def test_describe_disk_names_the_free_space_and_the_place(tmp_path):
    line = machine_info.describe_disk(tmp_path)
    assert line.startswith("disk: ") and str(tmp_path) in line
    free_gib = float(line.split()[1])
    assert free_gib == pytest.approx(diskfull.free_bytes(tmp_path) / 2**30, abs=0.2)


@pytest.mark.parametrize(("free_gib", "most"), [(100.0, None), (2 * WORKER_DISK_GIB + 0.1, 2), (0.2, 1)])
def test_workers_are_as_many_as_the_free_disk_holds(monkeypatch, free_gib, most):
    monkeypatch.setattr(machine_info, "usable_cores", lambda: 7)
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: int(free_gib * 2**30))
    workers = pytest_xdist_auto_num_workers(None)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    if most is None:  # plenty of disk: the cores (7 + 1) and the memory decide
        assert workers == max(1, min(8, int(memory_gib // WORKER_MEMORY_GIB)))
    else:
        assert workers == most
