"""A tenant's cap on its requests queued per model (switchyard.admission.QueuedWork):
the rule, the router's 429 queue_full, and the worker giving places back."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from harness.fakes import (
    EchoRuntime,
    FakeQueue,
    FakeResults,
    version_record,
    worker_over_fakes,
)
from harness.router_app import predict_service, router_client
from switchyard.admission import (
    QUEUED_LEASE_GRID_SECONDS,
    AtCapacity,
    InMemoryQueuedCounts,
    QueuedWork,
    queued_lease,
)
from switchyard.queues import ModelLanes
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard_worker.worker import Worker
from tests.unit.test_router_app import IMAGE, KEYS
from tests.unit.test_worker import drain, send


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def queued_work(store=None, clock=None, **limits) -> QueuedWork:
    return QueuedWork(store or InMemoryQueuedCounts(), {"acme": 2, **limits}, 7, clock or Clock())


def test_over_its_cap_on_a_model_a_tenant_is_refused_queue_full_with_when_to_retry():
    # GIVEN acme with its two requests queued on digits-cnn
    work = queued_work()
    work.take("acme", "digits-cnn", 1_000_060.0)
    work.take("acme", "digits-cnn", 1_003_600.0)
    # WHEN it queues one more there
    with pytest.raises(AtCapacity) as refused:
        work.take("acme", "digits-cnn", 1_000_060.0)
    # THEN queue_full, naming the model and the cap, with a Retry-After
    assert refused.value.code == "queue_full" and refused.value.retry_after_seconds == 7
    assert "2 requests queued for digits-cnn" in str(refused.value)
    # AND its other models, and other tenants, are counted apart
    assert work.take("acme", "minilm-embed", 1_000_060.0) is not None
    assert work.take("globex", "digits-cnn", 1_000_060.0) is None  # not capped


def test_a_place_given_back_is_free_again_and_never_counts_below_none():
    work = queued_work()
    first = work.take("acme", "m", 1_000_060.0)
    work.take("acme", "m", 1_000_060.0)
    work.give_back([first])
    work.give_back([first, first, first])  # more than there are: down to none
    assert work.take("acme", "m", 1_000_060.0) is not None
    assert work.take("acme", "m", 1_000_060.0) is not None
    with pytest.raises(AtCapacity):
        work.take("acme", "m", 1_000_060.0)


def test_a_crashed_holders_places_end_with_their_lease():
    # GIVEN acme at its cap, its requests' router and worker dead
    clock = Clock()
    work = queued_work(clock=clock)
    expiry = clock.now + 60
    lease = work.take("acme", "m", expiry)
    work.take("acme", "m", expiry)
    # THEN its places are held past the work's expiry, a margin, to the grid...
    assert lease is not None and lease.ends_at > expiry
    assert lease.ends_at - expiry <= QUEUED_LEASE_GRID_SECONDS + 120
    clock.now = lease.ends_at - 1
    with pytest.raises(AtCapacity):
        work.take("acme", "m", clock.now + 60)
    # ...and free once the lease has ended
    clock.now = lease.ends_at
    assert work.take("acme", "m", clock.now + 60) is not None


def test_a_handed_off_request_is_counted_at_the_cap_and_over_it():
    # GIVEN acme with its two requests queued on digits-cnn
    work = queued_work()
    work.take("acme", "m", 1_000_060.0)
    work.take("acme", "m", 1_000_060.0)
    # WHEN a sync request of its is handed off at its deadline (its message is queued)
    lease = work.add("acme", "m", 1_000_060.0)
    # THEN it counts, over the cap, and acme's next request is refused until it drains
    assert lease == queued_lease("acme", "m", 1_000_060.0)
    with pytest.raises(AtCapacity):
        work.take("acme", "m", 1_000_060.0)
    work.give_back([lease, lease])
    assert work.take("acme", "m", 1_000_060.0) is not None
    # AND a tenant not capped is not counted
    assert work.add("globex", "m", 1_000_060.0) is None


def test_a_hand_off_that_cannot_be_counted_is_queued_uncounted(caplog):
    class Down(InMemoryQueuedCounts):
        def add(self, lease, now):
            raise ConnectionError("DynamoDB is unreachable")

    assert queued_work(Down()).add("acme", "m", 1_000_060.0) is None
    assert "counting queued work failed" in caplog.text


def test_whoever_ends_a_request_works_out_the_same_lease():
    assert queued_lease("acme", "m", 1_000_061.25) == queued_lease("acme", "m", 1_000_061.25)
    # leases ending in one grid step are counted together
    assert queued_lease("acme", "m", 1_000_001.0).step == queued_lease("acme", "m", 1_000_002).step


# The router: 429 queue_full, another tenant answered, places given back.


@pytest.fixture
def router(digits_v1):
    results = FakeResults()
    lanes = {
        "digits-cnn": ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch")),
        "minilm-embed": ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch")),
    }
    store = InMemoryQueuedCounts()
    service = predict_service(
        lanes,
        digits_v1,
        version_record("minilm-embed"),
        results=results,
        queued_work=QueuedWork(store, {"acme": 2, "globex": 2}, 5),
    )
    return router_client(service, KEYS), lanes, store, results


def predict(client, tenant, model="digits-cnn", query="?async=true"):
    body = {"inputs": [IMAGE]} if model == "digits-cnn" else {"inputs": ["a sentence"]}
    return client.post(
        f"/v1/models/{model}/predict{query}", json=body, headers={"x-api-key": f"k-{tenant}"}
    )


def held(store, tenant, model) -> int:
    return sum(store.counts.get((tenant, model), {}).values())


def test_over_its_cap_a_tenants_request_is_429_queue_full_and_another_tenant_is_answered(router):
    # GIVEN acme with two async requests queued on digits-cnn
    client, lanes, store, _ = router
    assert [predict(client, "acme").status_code for _ in range(2)] == [202, 202]
    # WHEN it sends a third
    refused = predict(client, "acme")
    # THEN 429 queue_full with Retry-After, in the platform's error shape; not queued
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["code"] == "queue_full"
    assert "digits-cnn" in refused.json()["message"]
    assert len(lanes["digits-cnn"].realtime.visible) == 2
    # AND globex's request to the same model is queued, and acme's to another model
    assert predict(client, "globex").status_code == 202
    assert predict(client, "acme", "minilm-embed").status_code == 202
    # AND each message says it was counted, so its worker gives its place back
    assert all('"queued_counted":true' in m["body"] for m in lanes["digits-cnn"].realtime.visible)


def test_a_sync_call_is_not_refused_at_the_cap_it_counts_from_its_hand_off(router):
    # GIVEN acme at its cap on minilm-embed
    client, _, store, _ = router
    for _ in range(2):
        assert predict(client, "acme", "minilm-embed").status_code == 202
    # WHEN it calls the OpenAI API (sync: its caller waits, its sync slots bound it)
    response = client.post(
        "/openai/v1/embeddings",
        json={"model": "minilm-embed", "input": "a sentence"},
        headers={"x-api-key": "k-acme", "x-deadline-ms": "30"},
    )
    # THEN it is not refused; handed off at its deadline, it counts from then, over
    # the cap
    assert response.status_code != 429, response.text
    assert held(store, "acme", "minilm-embed") == 3


def test_a_cancelled_request_gives_its_place_back_at_once(router):
    # GIVEN acme at its cap
    client, _, store, _ = router
    first = predict(client, "acme").json()["request_id"]
    predict(client, "acme")
    # WHEN it cancels one (twice: the second finds it cancelled already)
    for _ in range(2):
        assert client.delete(f"/v1/requests/{first}", headers={"x-api-key": "k-acme"}).status_code
    # THEN one place is free, and only one
    assert held(store, "acme", "digits-cnn") == 1
    assert predict(client, "acme").status_code == 202
    assert predict(client, "acme").status_code == 429


def test_a_request_whose_message_was_not_sent_holds_no_place(router):
    client, lanes, store, _ = router

    def broken(body, group):
        raise ConnectionError("SQS is unreachable")

    lanes["digits-cnn"].realtime.send = broken
    with pytest.raises(ConnectionError):
        predict(client, "acme")
    assert held(store, "acme", "digits-cnn") == 0


# The worker: the place is given back once the request's result is stored.


# A sync request: counted only from its hand-off at its deadline, given back once.


class CountingStore(InMemoryQueuedCounts):
    """The counts, with each write the router or worker makes to them logged."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def take(self, wanted, now):
        self.writes.append("take")
        return super().take(wanted, now)

    def add(self, lease, now):
        self.writes.append("add")
        super().add(lease, now)

    def give_back(self, lease, count):
        self.writes.append(f"give_back {count}")
        super().give_back(lease, count)


class Later:
    """The router's clock, moved on at will."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


@pytest.fixture
def sync(digits_v1):
    results = FakeResults()
    lanes = {"digits-cnn": ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch"))}
    store = CountingStore()
    later = Later()
    service = predict_service(
        lanes,
        digits_v1,
        results=results,
        queued_work=QueuedWork(store, {"acme": 2}, 5),
        clock=later,
    )
    client = router_client(service, KEYS)
    return SimpleNamespace(
        client=client, service=service, lanes=lanes, store=store, results=results, later=later
    )


def sync_predict(client, deadline_ms="30"):
    return client.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k-acme", "x-deadline-ms": deadline_ms},
    )


def worker_on(realtime, store, digits_v1, results, runtime=None) -> Worker:
    return worker_over_fakes(
        digits_v1,
        runtime or EchoRuntime(),
        realtime=realtime,
        results=results,
        queued=QueuedWork(store),  # a worker only gives back
    )


def test_a_sync_request_answered_in_time_takes_no_place_at_all(sync):
    # GIVEN a worker that answers at once
    sent: list[QueueMessage] = []

    def answer(body: str) -> None:
        m = QueueMessage.model_validate_json(body)
        sent.append(m)
        now = time.time()
        sync.results.complete(
            ResultRecord(
                request_id=m.request_id, tenant=m.tenant, model=m.model, version=m.version,
                status="done", outputs=[[0.5]], created_at=now, completed_at=now,
                expires_at=int(now) + 60,
            )
        )  # fmt: skip

    sync.lanes["digits-cnn"].realtime.on_send = answer
    # WHEN acme, capped, calls sync, three times (more than its cap)
    for _ in range(3):
        assert sync_predict(sync.client, "5000").status_code == 200
    # THEN no write to its queued work at all: none taken, none given back
    assert sync.store.writes == []
    assert [m.queued_counted for m in sent] == [False] * 3


def test_a_handed_off_request_counts_once_and_its_worker_gives_it_back_once(sync, digits_v1):
    # GIVEN acme's sync request handed off at its deadline (202)
    handed = sync_predict(sync.client)
    assert handed.status_code == 202, handed.text
    rid = handed.json()["request_id"]
    realtime = sync.lanes["digits-cnn"].realtime
    assert '"queued_counted":false' in realtime.visible[0]["body"]
    # THEN it counts from then, and its record says so
    assert sync.store.writes == ["add"]
    assert held(sync.store, "acme", "digits-cnn") == 1
    assert sync.results.get("acme", rid).queued_counted
    # WHEN its fallback copy (same id, its flag copied: false) is answered first
    first = realtime.visible.pop()
    message = QueueMessage.model_validate_json(first["body"])
    realtime.send(message.model_copy(update={"fallback": True}).model_dump_json(), "acme")
    worker = worker_on(realtime, sync.store, digits_v1, sync.results)
    drain(worker)
    # THEN the copy's result, stored over the counted record, gives its place back
    assert sync.results.get("acme", rid).status == "done"
    assert sync.store.writes == ["add", "give_back 1"]
    # AND the first version's result, refused, gives nothing back
    realtime.send(first["body"], "acme")
    drain(worker)
    assert sync.store.writes == ["add", "give_back 1"]
    assert held(sync.store, "acme", "digits-cnn") == 0


@pytest.mark.parametrize("ends", ["cancelled", "expired"])
def test_a_handed_off_request_ended_by_the_router_gives_its_place_back_once(sync, digits_v1, ends):
    # GIVEN acme's sync request handed off at its deadline
    rid = sync_predict(sync.client).json()["request_id"]
    headers = {"x-api-key": "k-acme"}
    # WHEN it is cancelled, or read once its work has expired (twice each)
    for _ in range(2):
        if ends == "cancelled":
            sync.client.delete(f"/v1/requests/{rid}", headers=headers)
        else:
            sync.later.ahead = 3_600
            sync.client.get(f"/v1/requests/{rid}", headers=headers)
    # THEN it ends so and its place is given back, once
    assert sync.results.get("acme", rid).status == ends
    assert sync.store.writes == ["add", "give_back 1"]
    # AND the worker that runs it later stores nothing and gives nothing back
    drain(worker_on(sync.lanes["digits-cnn"].realtime, sync.store, digits_v1, sync.results))
    assert sync.store.writes == ["add", "give_back 1"]
    assert held(sync.store, "acme", "digits-cnn") == 0


def test_a_request_handed_off_after_its_result_is_stored_gives_its_place_back_at_once(sync):
    # GIVEN a sync request whose worker stored its result just before its deadline
    admitted = sync.service.submit(
        model="digits-cnn", tenant="acme", inputs=[IMAGE], sticky_headers={}, deadline_ms=30
    )
    assert admitted.queued is not None and not admitted.queued.queued_counted
    done = admitted.queued.model_copy(update={"status": "done", "outputs": [[0.5]]})
    sync.results.complete(done)
    # WHEN the router hands it off
    record = sync.service.hand_off(admitted)
    # THEN it answers with the result, and the place it counted is given back at once
    assert record is not None and record.status == "done"
    assert sync.store.writes == ["add", "give_back 1"]
    assert held(sync.store, "acme", "digits-cnn") == 0


def test_a_stream_whose_tokens_flow_is_recorded_uncounted(sync):
    # GIVEN a sync generation streaming its tokens: recorded, so that it can be
    # read or cancelled while it runs, its caller holding a stream slot
    admitted = sync.service.submit(
        model="digits-cnn", tenant="acme", inputs=[IMAGE], sticky_headers={}, deadline_ms=30
    )
    assert sync.service.hand_off(admitted, counted=False) is None
    # THEN it takes no place, and its cancelling gives none back
    assert not sync.results.get("acme", admitted.request_id).queued_counted
    sync.service.cancel("acme", admitted.request_id)
    assert sync.results.get("acme", admitted.request_id).status == "cancelled"
    assert sync.store.writes == []


def test_handed_off_at_the_cap_it_counts_over_it_and_the_next_request_is_refused(sync, digits_v1):
    # GIVEN acme at its cap of two with async requests (each counted at its enqueue)
    for _ in range(2):
        response = sync.client.post(
            "/v1/models/digits-cnn/predict?async=true",
            json={"inputs": [IMAGE]},
            headers={"x-api-key": "k-acme"},
        )
        assert response.status_code == 202
        assert sync.results.get("acme", response.json()["request_id"]).queued_counted
    # WHEN a sync request of its is handed off at its deadline
    assert sync_predict(sync.client).status_code == 202
    # THEN it counts over the cap, and acme's next async request is refused
    assert held(sync.store, "acme", "digits-cnn") == 3
    refused = sync.client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k-acme"},
    )
    assert refused.status_code == 429 and refused.json()["code"] == "queue_full"
    assert sync.store.writes == ["take", "take", "add", "take"]
    # AND once the worker has answered the three, every place is given back
    drain(worker_on(sync.lanes["digits-cnn"].realtime, sync.store, digits_v1, sync.results))
    assert held(sync.store, "acme", "digits-cnn") == 0
    assert sum(int(w.split()[1]) for w in sync.store.writes if w.startswith("give_back")) == 3


def test_a_handed_off_request_whose_retries_run_out_gives_its_place_back_once(sync, digits_v1):
    # GIVEN acme's sync request handed off, on a model that fails every attempt
    rid = sync_predict(sync.client).json()["request_id"]
    realtime = sync.lanes["digits-cnn"].realtime
    worker = worker_on(realtime, sync.store, digits_v1, sync.results, EchoRuntime(fail=True))
    # WHEN its retries run out
    for _ in range(12):
        drain(worker)
    # THEN its final error was stored over its counted record, its place given back once
    assert sync.results.get("acme", rid).error.code == "retries_exhausted"
    assert len(realtime.dead) == 1
    assert sync.store.writes == ["add", "give_back 1"]


def test_the_worker_gives_back_the_places_of_the_requests_it_answered(digits_v1):
    # GIVEN acme's three requests counted by the router, and one of a job (uncounted)
    store = InMemoryQueuedCounts()
    work = QueuedWork(store, {"acme": 3}, 5, clock=time.time)
    realtime, batch = FakeQueue("realtime"), FakeQueue("batch")
    expires = time.time() + 3600
    for i in range(3):
        assert work.take("acme", "digits-cnn", expires) is not None
        send(realtime, f"r{i}", expires_at=expires, counted=True)
    send(realtime, "job-line", expires_at=expires)
    worker = worker_over_fakes(
        digits_v1,
        EchoRuntime(),
        realtime=realtime,
        batch=batch,
        queued=QueuedWork(store),  # a worker only gives back
    )
    # WHEN the worker answers them
    drain(worker)
    # THEN their places are free, and no more than theirs were given back
    assert held(store, "acme", "digits-cnn") == 0
    for _ in range(3):
        work.take("acme", "digits-cnn", expires)
    with pytest.raises(AtCapacity):
        work.take("acme", "digits-cnn", expires)
