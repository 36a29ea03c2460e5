"""Tenants' queued work counted in the results table (DynamoDBQueuedCounts), on the
emulator: shared by every router and worker, given back in one write per batch,
reclaimed after its lease, and an item that stays small however much is queued."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from switchyard.admission import (
    QUEUED_LEASE_GRID_SECONDS,
    AtCapacity,
    DynamoDBQueuedCounts,
    QueuedWork,
    queued_lease,
)
from switchyard.results import DynamoDBResultStore
from tests.integration.test_admission_slots import Clock

KEY = {"tenant": {"S": "acme"}, "request_id": {"S": "admission#queued#digits-cnn"}}


@pytest.fixture
def counted(manifest, provisioned, clients):
    """Two routers' and a worker's view of one table, as separate processes have."""
    table = manifest.names("dev").results_table
    clock = Clock()

    def router(cap: int = 3) -> QueuedWork:
        store = DynamoDBQueuedCounts(clients("dynamodb"), table)
        return QueuedWork(store, {"acme": cap, "globex": cap}, 5, clock)

    def item() -> dict:
        return clients("dynamodb").get_item(TableName=table, Key=KEY).get("Item", {})

    clients("dynamodb").delete_item(TableName=table, Key=KEY)
    return router, clock, item, table


def test_the_cap_is_counted_across_routers_and_given_back_by_a_worker(counted):
    router, clock, item, _ = counted
    first, second, worker = router(), router(), router()
    expiry = clock.now + 60
    # GIVEN acme's three requests queued through two routers
    leases = [first.take("acme", "digits-cnn", expiry), second.take("acme", "digits-cnn", expiry)]
    leases.append(first.take("acme", "digits-cnn", expiry))
    # WHEN it asks either for one more
    for r in (first, second):
        with pytest.raises(AtCapacity) as refused:
            r.take("acme", "digits-cnn", expiry)
        assert refused.value.code == "queue_full"
    # THEN globex's request to the model is its own
    assert first.take("globex", "digits-cnn", expiry) is not None
    # AND a worker that answers two of acme's gives their places back in one write
    worker.give_back(leases[:2])
    assert item()["held"]["N"] == "1"
    assert second.take("acme", "digits-cnn", expiry) is not None
    # AND giving back more than is held counts down to none, never below
    worker.give_back(leases * 3)
    assert item()["held"]["N"] == "0"


def test_a_dead_holders_places_are_reclaimed_once_their_lease_ends(counted):
    router, clock, item, _ = counted
    first = router()
    lease = None
    for _ in range(3):  # and the routers and workers of these requests died
        lease = first.take("acme", "digits-cnn", clock.now + 60)
    with pytest.raises(AtCapacity):
        first.take("acme", "digits-cnn", clock.now + 60)
    assert lease is not None
    clock.now = lease.ends_at
    second = router()
    for _ in range(3):
        second.take("acme", "digits-cnn", clock.now + 60)
    with pytest.raises(AtCapacity):
        second.take("acme", "digits-cnn", clock.now + 60)
    assert item()["held"]["N"] == "3"
    # a late give-back of a reclaimed place changes nothing
    second.give_back([lease])
    assert item()["held"]["N"] == "3"


def test_the_item_holds_one_count_per_grid_step_of_live_work(counted):
    # GIVEN a large cap, and many requests whose work expires over a few minutes
    router, clock, item, _ = counted
    work = router(cap=10_000)
    for i in range(200):
        work.take("acme", "digits-cnn", clock.now + 60 + i)
    # THEN the item holds a handful of counts, not one attribute per request
    steps = [name for name in item() if name.startswith("q_")]
    assert 1 <= len(steps) <= 2 and item()["held"]["N"] == "200"
    # AND once those steps have ended, the next take clears them on its way
    clock.now += 60 + 200 + 120 + 2 * QUEUED_LEASE_GRID_SECONDS
    work.take("acme", "digits-cnn", clock.now + 60)
    assert item()["held"]["N"] == "1"
    assert len([name for name in item() if name.startswith("q_")]) == 1


def test_racing_requests_never_queue_more_than_the_cap(counted):
    router, clock, _, _ = counted
    first, second = router(), router()

    def attempt(i: int):
        try:
            return (first if i % 2 else second).take("acme", "digits-cnn", clock.now + 60)
        except AtCapacity:
            return None

    with ThreadPoolExecutor(8) as pool:
        taken = [lease for lease in pool.map(attempt, range(12)) if lease is not None]
    assert len(taken) == 3


def test_a_counting_item_is_no_request_of_the_tenant(counted, clients):
    router, clock, item, table = counted
    router().take("acme", "digits-cnn", clock.now + 60)
    results = DynamoDBResultStore(clients("dynamodb"), table, None, 8_192)  # type: ignore[arg-type]
    assert results.get("acme", KEY["request_id"]["S"]) is None
    assert "expires_at" in item()  # an idle tenant's item ends with the table's TTL


def test_a_handed_off_request_is_counted_over_the_cap_in_one_write(counted, clients):
    # GIVEN acme at its cap of three, through a router
    router, clock, item, _ = counted
    work = router()
    expiry = clock.now + 60
    for _ in range(3):
        work.take("acme", "digits-cnn", expiry)
    calls: list[str] = []
    clients("dynamodb").meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
    )
    # WHEN another router hands a sync request of acme's off at its deadline
    lease = router().add("acme", "digits-cnn", expiry)
    # THEN it counts, over the cap, in one write, and acme's next request is refused
    assert lease is not None and calls == ["UpdateItem"]
    assert item()["held"]["N"] == "4" and item()[lease.step]["N"] == "4"
    with pytest.raises(AtCapacity):
        work.take("acme", "digits-cnn", expiry)
    # AND once the worker that answers it gives it back, one place is free again
    work.give_back([lease, lease])
    assert item()["held"]["N"] == "2"
    assert work.take("acme", "digits-cnn", expiry) is not None


def test_places_wanted_together_are_counted_in_one_update_while_they_all_fit(
    counted, clients
):
    # GIVEN acme's cap of three requests queued on the model, one queued
    router, clock, item, table = counted
    router().take("acme", "digits-cnn", clock.now + 60)
    ddb = clients("dynamodb")
    store = DynamoDBQueuedCounts(ddb, table)
    lease = queued_lease("acme", "digits-cnn", clock.now + 60)
    updates: list[str] = []

    def seen(**_: object) -> None:
        updates.append("UpdateItem")

    ddb.meta.events.register("before-call.dynamodb.UpdateItem", seen)
    try:
        # WHEN two places are wanted together
        assert store.take([(lease, 3), (lease, 3)], clock.now) == [True, True]
        # THEN both are counted in one update
        assert len(updates) == 1 and item()["held"]["N"] == "3"
        # AND with one place left, two wanted together are refused together, then
        # each is tried alone, in order, and the first is counted
        store.give_back(lease, 1)
        updates.clear()
        assert store.take([(lease, 3), (lease, 3)], clock.now) == [True, False]
        assert len(updates) == 3 and item()["held"]["N"] == "3"
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.UpdateItem", seen)
    # AND once their leases have ended, two are counted together, the ended reclaimed
    clock.now = lease.ends_at + 1
    later = queued_lease("acme", "digits-cnn", clock.now + 60)
    assert store.take([(later, 3), (later, 3)], clock.now) == [True, True]
    assert item()["held"]["N"] == "2" and item()[later.step]["N"] == "2"
    assert lease.step not in item()
