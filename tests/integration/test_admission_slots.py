"""Tenants' slots counted in the results table (DynamoDBSlotStore), on the emulator:
shared by every router that counts there, reclaimed after their lease, invisible
to a tenant's reads of its requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from switchyard.admission import Admission, AtCapacity, DynamoDBSlotStore, Slot
from switchyard.results import DynamoDBResultStore

LEASES = {"streams": 300.0, "sync_requests": 30.0}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def routers(manifest, provisioned, clients):
    """Two routers' admissions on one table, as two Lambda instances would have."""
    table = manifest.names("dev").results_table
    clock = Clock()
    caps = {"acme": {"streams": 2, "sync_requests": 3}, "globex": {"streams": 2}}

    def router() -> Admission:
        return Admission(DynamoDBSlotStore(clients("dynamodb"), table), caps, LEASES, 5, clock)

    return router(), router(), clock, table


def test_the_cap_is_counted_across_routers(routers):
    # GIVEN acme's streams taken on two routers
    first, second, _, _ = routers
    first.take("acme", "streams")
    held = second.take("acme", "streams")
    # WHEN either router is asked for a third
    for router in (first, second):
        with pytest.raises(AtCapacity):
            router.take("acme", "streams")
    # THEN another tenant's streams are its own
    assert first.take("globex", "streams") is not None
    # AND a slot given back on one router is free on the other
    second.give_back(held)
    second.give_back(held)  # twice: counted once
    assert first.take("acme", "streams") is not None
    with pytest.raises(AtCapacity):
        second.take("acme", "streams")


def test_a_dead_routers_slots_are_reclaimed_after_their_lease(routers):
    first, second, clock, _ = routers
    first.take("acme", "streams")
    first.take("acme", "streams")  # and the router that held them died
    clock.now += LEASES["streams"] + 1
    second.take("acme", "streams")
    second.take("acme", "streams")
    with pytest.raises(AtCapacity):
        second.take("acme", "streams")


def test_racing_requests_never_hold_more_than_the_cap(routers):
    # GIVEN 12 sync requests of acme at once, over two routers, with a cap of 3
    first, second, _, _ = routers

    def attempt(i: int):
        try:
            return (first if i % 2 else second).take("acme", "sync_requests")
        except AtCapacity:
            return None

    with ThreadPoolExecutor(8) as pool:
        taken = [slot for slot in pool.map(attempt, range(12)) if slot is not None]
    # THEN exactly 3 were admitted
    assert len(taken) == 3
    for slot in taken:
        first.give_back(slot)
    assert first.take("acme", "sync_requests") is not None


def test_a_counting_item_is_no_request_of_the_tenant(routers, provisioned, clients):
    first, _, _, table = routers
    first.take("acme", "streams")
    results = DynamoDBResultStore(clients("dynamodb"), table, None, 8_192)  # type: ignore[arg-type]
    assert results.get("acme", "admission#streams") is None
    item = clients("dynamodb").get_item(
        TableName=table, Key={"tenant": {"S": "acme"}, "request_id": {"S": "admission#streams"}}
    )["Item"]
    assert "expires_at" in item  # an idle tenant's item ends with the table's TTL


def test_slots_given_back_together_are_counted_off_once_each_in_few_updates(
    routers, manifest, clients
):
    # GIVEN acme holding its three sync slots and a stream, one sync slot given back
    # already on another router
    first, second, _, table = routers
    ddb = clients("dynamodb")
    store = DynamoDBSlotStore(ddb, table)
    held = [first.take("acme", "sync_requests") for _ in range(3)]
    stream = first.take("acme", "streams")
    second.give_back(held[0])
    assert first.take("acme", "sync_requests") is not None  # its place taken again
    # WHEN the three sync slots (one given back before, one twice) and the stream are
    # given back together
    updates: list[str] = []

    def counted(**_: object) -> None:
        updates.append("UpdateItem")

    ddb.meta.events.register("before-call.dynamodb.UpdateItem", counted)
    try:
        store.give_back([held[0], held[1], held[2], held[2], stream])  # type: ignore[list-item]
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.UpdateItem", counted)
    # THEN each item counts what is still held: the slot taken after, and no stream
    def held_count(kind: str) -> int:
        key = {"tenant": {"S": "acme"}, "request_id": {"S": f"admission#{kind}"}}
        item = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
        assert sum(name.startswith("slot_") for name in item) == int(item["held"]["N"])
        return int(item["held"]["N"])

    assert held_count("sync_requests") == 1
    assert held_count("streams") == 0
    # AND it took three updates: the sync slots' refused (one was gone), then the two
    # still held in one, and the stream's
    assert len(updates) == 3
    # AND the cap holds again at three
    first.take("acme", "sync_requests")
    first.take("acme", "sync_requests")
    with pytest.raises(AtCapacity):
        first.take("acme", "sync_requests")


def test_slots_wanted_together_are_taken_in_one_update_while_they_all_fit(routers, clients):
    # GIVEN acme's cap of three sync requests, one held, and one of its streams
    first, _, clock, table = routers
    ddb = clients("dynamodb")
    store = DynamoDBSlotStore(ddb, table)
    first.take("acme", "sync_requests")
    expiry = clock.now + LEASES["sync_requests"]

    def wanted(n: int, kind: str = "sync_requests") -> list:
        return [(Slot("acme", kind, f"w{kind[:2]}{i}{n}", expiry), 3) for i in range(n)]  # type: ignore[arg-type]

    updates: list[str] = []

    def counted(**_: object) -> None:
        updates.append("UpdateItem")

    ddb.meta.events.register("before-call.dynamodb.UpdateItem", counted)
    try:
        # WHEN two sync slots and a stream are wanted together
        assert store.take(wanted(2) + wanted(1, "streams"), clock.now) == [True, True, True]
        # THEN each item took one update
        assert len(updates) == 2
        # AND with one place left, two wanted together: refused together, then each
        # tried alone, in order, and the first holds the place
        store.give_back([wanted(2)[0][0]])
        updates.clear()
        assert store.take(wanted(3)[:2], clock.now) == [True, False]
        assert len(updates) == 3
        # AND once the held ones expire, a pair is taken in one update, reclaiming them
        clock.now += LEASES["sync_requests"] + 1
        updates.clear()
        later = [(Slot("acme", "sync_requests", f"late{i}", clock.now + 30), 3) for i in range(2)]
        assert store.take(later, clock.now) == [True, True]  # type: ignore[arg-type]
        assert len(updates) == 2  # refused, then taken with the expired ones removed
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.UpdateItem", counted)
    key = {"tenant": {"S": "acme"}, "request_id": {"S": "admission#sync_requests"}}
    item = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert int(item["held"]["N"]) == 2
    assert sorted(n for n in item if n.startswith("slot_")) == ["slot_late0", "slot_late1"]
