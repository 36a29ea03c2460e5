from __future__ import annotations

from switchyard.queues import Received
from switchyard.schemas import QueueMessage
from switchyard_worker.batching import REALTIME_RECENT_S, BatchAssembler, Pending


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
    return Pending(
        received=received, arrived=at, received_at=at, message=message, inputs=[[0]] * n, size=n
    )


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


def test_a_tenant_of_weight_three_gets_three_messages_a_turn_to_one_of_weight_one():
    # GIVEN a premium tenant (weight 3) and a standard one (weight 1), each with a
    # backlog in hand, the standard tenant's message the oldest
    clock = Clock()
    a = BatchAssembler(lambda version: (8, 0.010), clock=clock, weights={"premium": 3})
    a.add(pending("standard"))
    premium = [pending("premium") for _ in range(20)]
    for p in premium:
        a.add(p)
    for _ in range(19):
        a.add(pending("standard"))
    # WHEN the batches are taken
    first, second = a.take(), a.take()
    # THEN each turn is the oldest's tenant's one message, then three of the other's
    assert [p.tenant for p in first] == ["standard", *["premium"] * 3] * 2
    assert [p.tenant for p in second].count("premium") == 6
    # AND within a tenant the oldest go first
    assert [p for p in first + second if p.tenant == "premium"] == premium[:12]


def test_a_lone_tenant_fills_its_batch_whatever_its_weight():
    clock = Clock()
    a = BatchAssembler(lambda version: (8, 0.010), clock=clock, weights={"premium": 3})
    for _ in range(10):
        a.add(pending("standard"))
    assert len(a.take()) == 8


def test_a_lone_tenants_batch_is_its_oldest_messages_until_the_next_does_not_fit():
    # GIVEN one tenant's requests of 3, 2, 2, 4 and 1 inputs of one version, another
    # version's request held among them, and batches of at most 8 inputs
    clock = Clock()
    a = BatchAssembler(lambda version: (8, 0.010), clock=clock, weights={"acme": 2})
    held = [pending("acme", n=n) for n in (3, 2)]
    other = pending("acme", version="v2")
    held += [pending("acme", n=n) for n in (2, 4, 1)]
    for p in (*held[:2], other, *held[2:]):
        a.add(p)
    # WHEN batches are taken, one after the other
    clock.now += 1
    first, second, third = a.take(), a.take(), a.take()
    # THEN the first is its oldest that fit, in order, up to the one that does not
    # (the one of 1 after it waits with it); the other version's goes next, alone;
    # then the rest, in order; nothing is left
    assert first == held[:3] and second == [other] and third == held[3:]
    assert a.held == [] and a.inputs_of("v1") == 0 and a.inputs_of("v2") == 0
    # AND a lone message larger than the batch still runs, and the next waits
    big, after = pending("acme", n=10), pending("acme", n=1)
    a.add(big)
    a.add(after)
    assert a.take() == [big] and a.held == [after]


def test_a_tenant_alone_then_joined_by_another_a_retry_or_another_version():
    # GIVEN batches of 4, and one tenant's requests held alone, then taken
    clock = Clock()
    a = assembler(clock, size=4)
    acme = [pending("acme") for _ in range(6)]
    for p in acme:
        a.add(p)
    assert a.take() == acme[:4]
    # WHEN another tenant's request comes beside the rest of the first's
    globex = pending("globex")
    a.add(globex)
    # THEN the next batch takes turns between them
    assert a.take(force=True) == [acme[4], globex, acme[5]]
    assert a.held == []
    # AND a retry held among one tenant's requests runs alone, first, as the oldest
    again = [pending("acme") for _ in range(2)]
    retry = pending("acme", count=2)
    for p in (retry, *again):
        a.add(p)
    assert a.take(force=True) == [retry] and a.take(force=True) == again
    # AND another version's request held among them runs in a batch of its own
    v2 = pending("acme", version="v2")
    later = [pending("acme") for _ in range(5)]
    for p in (later[0], v2, *later[1:]):
        a.add(p)
    assert a.take() == later[:4]
    assert a.take(force=True) == [v2] and a.take(force=True) == later[4:]
    assert a.held == [] and a.inputs_of("v1") == 0 and a.inputs_of("v2") == 0


def test_weights_count_messages_and_the_oldest_message_always_rides():
    # GIVEN a standard tenant's oldest request of 6 inputs, and a premium tenant
    # (weight 3) with many one-input requests
    clock = Clock()
    a = BatchAssembler(lambda version: (8, 0.010), clock=clock, weights={"premium": 3})
    a.add(pending("standard", n=6))
    for _ in range(8):
        a.add(pending("premium"))
    # WHEN a batch of 8 inputs is taken
    batch = a.take()
    # THEN the oldest request is in it, and the premium tenant's turn stops when its
    # next message no longer fits
    assert [(p.tenant, p.size) for p in batch] == [("standard", 6), ("premium", 1), ("premium", 1)]


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
    assert a.holds_batch_lane and a.realtime_inputs == 0
    late = pending("globex", n=1, at=101.0)
    a.add(late)
    assert a.holds_batch_lane and a.realtime_inputs == 1
    clock.now = 102.0
    assert a.take() == [late]
    assert a.take() == [chunks[0]]


def test_a_jobs_inputs_run_in_smaller_parts_while_realtime_work_comes_in():
    clock = Clock()
    a = assembler(clock, size=32)
    # GIVEN only a job's chunk held: its inputs run max_batch_size at a time
    chunk = pending("acme", n=64)
    chunk.received = Received("{}", "c", "c", 1, "acme", "batch")
    a.add(chunk)
    assert a.part_size(32) == 32
    # WHEN a realtime request comes in: an eighth at a time, for as long as they come
    a.add(pending("globex"))
    assert a.part_size(32) == 4 and a.part_size(3) == 1
    clock.now += REALTIME_RECENT_S - 1
    assert a.part_size(32) == 4
    # THEN none for REALTIME_RECENT_S: whole parts again
    clock.now += 2
    assert a.part_size(32) == 32


def sync_pending(respond_in: float, n: int = 1, at: float = 100.0):
    """A sync request received at ``at`` whose caller wants it ``respond_in`` s later."""
    p = pending("t1", n=n, at=at)
    p.message = p.message.model_copy(update={"respond_by": at + respond_in})
    return p


def test_the_batch_cost_is_learned_as_a_line_in_its_size():
    from switchyard_worker.batching import BatchCost

    cost = BatchCost()
    assert cost.expected(8) == 0.0  # nothing seen: no estimate
    cost.observe(4, 0.012)
    assert abs(cost.expected(8) - 0.024) < 1e-9  # one size seen: scaled by size
    for size in (1, 2, 4, 8, 16, 32):
        cost.observe(size, 0.010 + 0.002 * size)
    assert abs(cost.expected(64) - (0.010 + 0.002 * 64)) < 0.003


def test_a_lone_request_is_not_held_when_the_queue_is_drained_and_nothing_is_coming():
    # GIVEN a 50 ms max wait, one request in hand, and a receive that found the queue empty
    clock = Clock()
    a = assembler(clock, size=32, wait=0.050)
    a.add(pending("t1"))
    assert a.take() == []  # not drained: it waits, as before
    a.drained = True
    # WHEN nothing has arrived for a while (the rate is one message in 2 s)
    # THEN the batch is due at once
    assert a.time_left() == 0.0 and len(a.take()) == 1


def test_at_a_high_arrival_rate_a_drained_queue_still_waits_for_the_next_messages():
    clock = Clock()
    a = assembler(clock, size=32, wait=0.050)
    for i in range(200):  # 200 messages over the last second: 100 a second
        clock.now = 99.0 + i / 200
        a.add(pending("t1", at=clock.now))
        a.take(force=True)
    clock.now = 100.0
    a.add(pending("t1"))
    a.drained = True
    assert abs(a.time_left() - 0.050) < 1e-9  # about 5 more are expected in 50 ms
    assert a.take() == []


def test_a_batch_starts_early_enough_to_answer_a_sync_caller_by_its_deadline():
    # GIVEN batches of this version cost ~40 ms, a 200 ms max wait, and a caller
    # who wants the answer 100 ms after it was received
    clock = Clock()
    a = assembler(clock, size=32, wait=0.200)
    for _ in range(3):
        a.ran("v1", 1, 0.040)
    a.add(sync_pending(respond_in=0.100))
    # WHEN 50 ms have passed, it still waits; at 61 ms it is due (100 - 40 ms)
    clock.now += 0.050
    assert a.take() == [] and abs(a.time_left() - 0.010) < 1e-6
    clock.now += 0.011
    assert len(a.take()) == 1


def test_async_work_waits_its_full_max_wait():
    clock = Clock()
    a = assembler(clock, size=32, wait=0.200)
    a.ran("v1", 1, 0.040)
    a.add(pending("t1"))
    clock.now += 0.150
    assert a.take() == []
    clock.now += 0.051
    assert len(a.take()) == 1


def test_what_is_held_is_counted_per_version_as_messages_come_and_go():
    # GIVEN messages of two versions, one of 3 inputs
    clock = Clock()
    a = assembler(clock, size=4)
    a.add(pending("t1", version="v1"))
    a.add(pending("t2", n=3, version="v2"))
    a.add(pending("t1", version="v1"))
    assert (a.inputs_of("v1"), a.inputs_of("v2"), a.held_inputs) == (2, 3, 5)
    # WHEN v1's batch is taken, THEN only v2's inputs are left, and v2 is the oldest
    clock.now += 0.011
    assert {p.version for p in a.take()} == {"v1"}
    assert (a.inputs_of("v1"), a.inputs_of("v2"), a.oldest.version) == (0, 3, "v2")
    # AND a drain leaves nothing counted
    a.drain()
    assert (a.inputs_of("v2"), a.held_inputs, a.oldest) == (0, 0, None)


def test_once_the_most_urgent_caller_is_taken_the_next_one_sets_the_time_left():
    # GIVEN batches of 4 that cost ~40 ms, a 200 ms max wait, and six sync callers:
    # the four oldest want their answers 100 ms after receipt, the two others 300 ms
    clock = Clock()
    a = assembler(clock, size=4, wait=0.200)
    for _ in range(3):
        a.ran("v1", 1, 0.040)
    for _ in range(4):
        a.add(sync_pending(respond_in=0.100))
    a.add(sync_pending(respond_in=0.300))
    a.add(sync_pending(respond_in=0.300))
    # WHEN the full batch of the urgent four is taken
    assert len(a.take()) == 4
    # THEN the two left wait up to max_wait (200 ms), no longer the urgent 100 - 80 ms
    assert abs(a.time_left() - 0.200) < 1e-6


def test_a_sync_caller_goes_before_another_tenants_async_backlog_in_a_batch_of_its_own():
    # GIVEN acme's async backlog in hand, and then globex's sync call
    clock = Clock()
    a = assembler(clock, size=16)
    backlog = [pending("acme", at=100.0 + i / 100) for i in range(40)]
    for p in backlog:
        a.add(p)
    call = sync_pending(respond_in=5.0, at=100.5)
    call.message = call.message.model_copy(update={"tenant": "globex"})
    call.received = Received("{}", "g", "g", 1, "globex", "realtime")
    a.add(call)
    # WHEN the worker takes its next batch
    first = a.take()
    # THEN it is the sync call alone: not behind acme's older work, nor padded with it
    assert first == [call]
    # AND acme's backlog follows, oldest first, in batches of an eighth of the most
    # while sync calls come in: the next sync call waits behind a small batch
    assert a.take() == backlog[:2]
    assert a.take() == backlog[2:4]
    # AND whole batches again once no sync call has come for REALTIME_RECENT_S
    clock.now += REALTIME_RECENT_S
    assert a.take() == backlog[4:20]


def test_sync_callers_of_several_tenants_share_a_batch_in_turns():
    clock = Clock()
    a = assembler(clock, size=4)
    for _ in range(3):
        a.add(pending("acme"))
    calls = [sync_pending(respond_in=5.0) for _ in range(3)]
    for i, call in enumerate(calls):
        tenant = "globex" if i else "acme"
        call.message = call.message.model_copy(update={"tenant": tenant})
        call.received = Received("{}", f"s{i}", f"s{i}", 1, tenant, "realtime")
        a.add(call)
    batch = a.take()
    assert sorted(map(id, batch)) == sorted(map(id, calls))  # the sync calls alone
