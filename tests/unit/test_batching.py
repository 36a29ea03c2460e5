from __future__ import annotations

from switchyard.queues import Received
from switchyard.schemas import QueueMessage
from switchyard_worker.batching import BatchAssembler, Pending


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pending(tenant: str, n: int = 1, version: str = "v1", count: int = 1, at: float = 100.0):
    rid = f"{tenant}-{n}-{at}-{count}-{id(object())}"
    message = QueueMessage(
        request_id=rid[:64],
        tenant=tenant,
        model="m",
        version=version,
        inputs=[[0]] * n,
        n_inputs=n,
        enqueued_at=0,
        expires_at=1e12,
    )
    received = Received("{}", rid, rid, count, tenant, "realtime")
    return Pending(received=received, arrived=at, received_at=at, message=message, inputs=[[0]] * n)


def assembler(clock, size=4, wait=0.010):
    return BatchAssembler(lambda version: (size, wait), clock=clock)


def test_nothing_is_taken_before_the_batch_is_full_or_due():
    clock = Clock()
    a = assembler(clock)
    a.add(pending("t1"))
    assert a.take() == []
    assert a.wants_more()


def test_a_full_batch_flushes_at_once():
    clock = Clock()
    a = assembler(clock, size=4)
    for _ in range(5):
        a.add(pending("t1"))
    batch = a.take()
    assert sum(p.size for p in batch) == 4
    assert len(a.held) == 1


def test_a_partial_batch_flushes_at_its_deadline():
    clock = Clock()
    a = assembler(clock, size=4, wait=0.010)
    a.add(pending("t1"))
    clock.now += 0.011
    assert len(a.take()) == 1


def test_batches_are_fair_across_tenants():
    clock = Clock()
    a = assembler(clock, size=4)
    for _ in range(8):
        a.add(pending("noisy"))
    a.add(pending("quiet"))
    a.add(pending("other"))
    batch = a.take()
    tenants = [p.tenant for p in batch]
    assert "quiet" in tenants and "other" in tenants
    assert tenants.count("noisy") == 2


def test_a_batch_never_mixes_versions():
    clock = Clock()
    a = assembler(clock, size=8)
    a.add(pending("t1", version="v1"))
    a.add(pending("t2", version="v2"))
    a.add(pending("t3", version="v1"))
    clock.now += 1
    assert {p.version for p in a.take()} == {"v1"}
    assert {p.version for p in a.take()} == {"v2"}


def test_a_retried_message_runs_alone():
    clock = Clock()
    a = assembler(clock, size=8)
    a.add(pending("t1", count=2))
    a.add(pending("t2"))
    clock.now += 1
    first = a.take()
    assert len(first) == 1 and first[0].is_retry


def test_a_message_larger_than_the_batch_still_runs():
    clock = Clock()
    a = assembler(clock, size=4)
    a.add(pending("t1", n=10))
    assert [p.size for p in a.take()] == [10]


def test_drain_returns_everything_not_started():
    clock = Clock()
    a = assembler(clock)
    a.add(pending("t1"))
    a.add(pending("t2"))
    assert len(a.drain()) == 2
    assert a.held == []


def test_realtime_work_runs_before_batch_lane_work_held_before_it():
    clock = Clock()
    a = assembler(clock, size=4)
    chunks = [pending("acme", n=4, at=100.0) for _ in range(3)]
    for chunk in chunks:
        chunk.received = Received("{}", "c", "c", 1, "acme", "batch")
        a.add(chunk)
    assert a.holds_only_batch_lane
    late = pending("globex", n=1, at=101.0)
    a.add(late)
    assert not a.holds_only_batch_lane
    clock.now = 102.0
    assert a.take() == [late]
    assert a.take() == [chunks[0]]
