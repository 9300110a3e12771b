"""The experience client splits a batch into requests under a byte cap, in order, so no run's request
outgrows the pool's body limit however many trajectories a step has."""

from __future__ import annotations

from agentrl_core.experience.client import MAX_REQUEST_BYTES, request_batches
from agentrl_core.experience.pool_api import ExperienceIn
from agentrl_core.experience.service import MAX_BODY_BYTES


def _item(i: int, chars: int) -> ExperienceIn:
    return ExperienceIn(env="e", task_id=i, when_to_use="w", content="c" * chars)


def _size(items: list[ExperienceIn]) -> int:
    return sum(len(x.model_dump_json().encode()) for x in items)


def test_batches_keep_order_and_stay_under_the_cap():
    items = [_item(i, 100 + 20 * i) for i in range(60)]  # each under the cap (1,280 characters at most)
    batches = list(request_batches(items, max_bytes=2000))
    assert [x for b in batches for x in b] == items and len(batches) > 1
    assert all(_size(b) <= 2000 for b in batches)
    # greedy: each batch is full, i.e. the next item would not have fitted
    assert all(_size(b) + len(nxt[0].model_dump_json().encode()) > 2000 for b, nxt in zip(batches, batches[1:]))


def test_an_item_over_the_cap_goes_alone_and_the_count_is_capped():
    big, small = _item(0, 5000), _item(1, 10)
    assert list(request_batches([small, big, small], max_bytes=1000)) == [[small], [big], [small]]
    assert [len(b) for b in request_batches([small] * 7, max_items=3)] == [3, 3, 1]
    assert list(request_batches([])) == [[]]  # an empty batch is still sent once (the server validates it)


def test_the_pools_limit_leaves_room_for_the_clients_largest_request():
    assert MAX_REQUEST_BYTES * 4 <= MAX_BODY_BYTES
