"""GPU slots: per-GPU global concurrency limits held all-or-none by concurrent stages (real Prefect server)."""

from __future__ import annotations

import threading

import pytest

from agentrl_core.config import RecipeConfig
from tasks.gpu import gpu_slots, gpus_needed


def _limits(n: int) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    with get_client(sync_client=True) as client:
        for i in range(n):
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=f"gpu-{i}", limit=1))


def test_stages_need_gpus_only_where_there_are_some():
    cfg = RecipeConfig()
    assert gpus_needed(cfg, 0) == 0  # a CPU-only machine holds nothing
    assert gpus_needed(cfg, 4) == 1
    ray = cfg.model_copy(update={"distributed": cfg.distributed.model_copy(update={"train_gpus": 2, "rollout_gpus": 1.0})})
    assert gpus_needed(ray, 8) == 3 and gpus_needed(ray, 2) == 2


@pytest.mark.slow
def test_concurrent_holders_get_different_gpus_and_wait_for_a_free_one(prefect_harness, monkeypatch):
    import os

    _limits(2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    held: dict[str, list[int]] = {}
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with gpu_slots(1, 2) as ids:
            held["first"] = ids
            first_in.set()
            release.wait(30)

    t = threading.Thread(target=first)
    t.start()
    assert first_in.wait(30)
    with gpu_slots(1, 2) as ids:  # the other card is free
        held["second"] = ids
        assert os.environ["CUDA_VISIBLE_DEVICES"] == str(ids[0])
    with pytest.raises(TimeoutError, match="could not hold 2 of 2 GPU slots"):
        with gpu_slots(2, 2, wait_s=0.2, timeout_s=2):  # one card is taken: all-or-none gives up
            pass
    release.set()
    t.join(30)
    assert sorted(held["first"] + held["second"]) == [0, 1]
    with gpu_slots(2, 2, wait_s=0.2, timeout_s=20) as both:  # both free again
        assert both == [0, 1] and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # restored
