"""A tenant's cap on its requests queued per model (switchyard.admission.QueuedWork):
the rule, the router's 429 queue_full, and the worker giving places back."""

from __future__ import annotations

import time

import pytest

from harness.fakes import (
    EchoRuntime,
    FakePayloads,
    FakeQueue,
    FakeRegistry,
    FakeResults,
    version_record,
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


def test_the_openai_api_answers_queue_full_in_its_own_shape(router):
    client, _, _, _ = router
    for _ in range(2):
        assert predict(client, "acme", "minilm-embed").status_code == 202
    response = client.post(
        "/openai/v1/embeddings",
        json={"model": "minilm-embed", "input": "a sentence"},
        headers={"x-api-key": "k-acme"},
    )
    assert response.status_code == 429 and response.headers["retry-after"] == "5"
    assert response.json()["error"]["code"] == "queue_full"


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
    worker = Worker(
        model="digits-cnn",
        worker_id="w1",
        realtime=realtime,
        batch=batch,
        registry=FakeRegistry(digits_v1),
        results=FakeResults(),
        payloads=FakePayloads(),
        load_runtime=lambda record: EchoRuntime(),
        visibility_timeout=60,
        poll_wait_seconds=0,
        queued=QueuedWork(store),  # a worker only gives back
    )
    worker.preload()
    # WHEN the worker answers them
    drain(worker)
    # THEN their places are free, and no more than theirs were given back
    assert held(store, "acme", "digits-cnn") == 0
    for _ in range(3):
        work.take("acme", "digits-cnn", expires)
    with pytest.raises(AtCapacity):
        work.take("acme", "digits-cnn", expires)
