"""Idempotency-Key on the router's POSTs that create work, on in-memory stores: a
retry with the same key and body is the first request again (nothing sent twice);
the same key with another body, or a malformed key, is refused naming the header."""

from __future__ import annotations

import json
import struct
import time

import pytest

from harness.fakes import (
    FakeQueue,
    FakeResults,
    answered,
)
from harness.router_app import predict_service, router_client
from switchyard.idempotency import IdempotencyKeys, InMemoryKeyStore, KeyReused, KeyUse, fingerprint
from switchyard.queues import ModelLanes
from switchyard.schemas import QueueMessage, ResultRecord

KEYS = {"k-acme": "acme", "k-globex": "globex"}
IMAGE = [0] * 64


class Worker(FakeQueue):
    """Answers each message at once (``answer``), as a worker would; ``fail_next``
    makes the next send fail, as a queue outage would."""

    def __init__(self, results: FakeResults) -> None:
        super().__init__("realtime")
        self.results = results
        self.answer = True
        self.fail_next = False
        self.runs = 0

    def send(self, body: str, group: str) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("queue unavailable")
        super().send(body, group)
        if not self.answer:
            return
        self.runs += 1
        m = QueueMessage.model_validate_json(body)
        self.results.complete(answered(m, {"class": self.runs}))


@pytest.fixture
def world(digits_v1, digits_v2):
    results = FakeResults()
    worker = Worker(results)
    lanes = {"digits-cnn": ModelLanes(realtime=worker, batch=FakeQueue("batch"))}
    service = predict_service(
        lanes,
        digits_v1,
        digits_v2,
        results=results,
        idempotency=IdempotencyKeys(InMemoryKeyStore()),
    )
    return router_client(service, KEYS, raise_server_exceptions=False), worker


def predict(client, body, idem=None, key="k-acme", query="", **headers):
    hdrs = {"content-type": "application/json", "x-api-key": key, **headers}
    if idem is not None:
        hdrs["Idempotency-Key"] = idem
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(f"/v1/models/digits-cnn/predict{query}", content=data, headers=hdrs)


def test_a_retry_with_the_same_key_and_body_is_the_first_request_again(world):
    client, worker = world
    # GIVEN a sync predict answered with an Idempotency-Key
    first = predict(client, {"inputs": [IMAGE]}, idem="order-1")
    assert first.status_code == 200, first.text
    # WHEN it is sent again, its body written another way
    again = predict(client, json.dumps({"inputs": [IMAGE]}, indent=2), idem="order-1")
    # THEN the answer is the first request's, and nothing more was sent or run
    assert again.status_code == 200, again.text
    assert again.json()["request_id"] == first.json()["request_id"]
    assert again.json()["outputs"] == first.json()["outputs"] == [{"class": 1}]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert worker.runs == 1 and len(worker.visible) == 1


def test_the_same_key_with_another_body_is_refused_naming_the_header(world):
    client, worker = world
    predict(client, {"inputs": [IMAGE]}, idem="order-2")
    refused = predict(client, {"inputs": [IMAGE, IMAGE]}, idem="order-2")
    assert refused.status_code == 422
    body = refused.json()
    assert body["code"] == "idempotency_key_reused"
    assert "order-2" in body["message"]
    assert body["errors"][0]["field"] == "Idempotency-Key"
    assert len(worker.visible) == 1


def test_a_key_belongs_to_its_tenant(world):
    client, worker = world
    acme = predict(client, {"inputs": [IMAGE]}, idem="shared")
    globex = predict(client, {"inputs": [IMAGE]}, idem="shared", key="k-globex")
    assert acme.json()["request_id"] != globex.json()["request_id"]
    assert len(worker.visible) == 2


@pytest.mark.parametrize("bad", ["has space", "x" * 256, "caf\u00e9".encode("latin-1")])
def test_a_malformed_key_is_refused_naming_the_header(world, bad):
    client, worker = world
    response = client.post(
        "/v1/models/digits-cnn/predict",
        content=json.dumps({"inputs": [IMAGE]}),
        headers=[
            ("content-type", "application/json"),
            ("x-api-key", "k-acme"),
            ("Idempotency-Key", bad),
        ],
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "Idempotency-Key"
    assert worker.visible == []


def test_a_replay_of_a_request_still_running_answers_as_the_first_would_now(world):
    client, worker = world
    worker.answer = False  # no worker yet: the request stays queued
    # GIVEN an async request, still queued
    first = predict(client, {"inputs": [IMAGE]}, idem="slow", query="?async=true")
    assert first.status_code == 202
    # WHEN it is replayed async, and sync with a short deadline
    again = predict(client, {"inputs": [IMAGE]}, idem="slow", query="?async=true")
    waited = predict(client, {"inputs": [IMAGE]}, idem="slow", **{"x-deadline-ms": "30"})
    # THEN both are the first request, queued, at its location; one message was sent
    for replay in (again, waited):
        assert replay.status_code == 202, replay.text
        assert replay.json()["request_id"] == first.json()["request_id"]
        assert replay.headers["Location"] == first.headers["Location"]
    assert len(worker.visible) == 1


def test_a_sync_replay_of_a_running_sync_request_waits_for_its_result(world):
    client, worker = world
    worker.answer = False
    first = predict(client, {"inputs": [IMAGE]}, idem="s", **{"x-deadline-ms": "20"})
    assert first.status_code == 202  # past its deadline: handed off
    # the worker stores its result meanwhile
    m = QueueMessage.model_validate_json(worker.visible[0]["body"])
    worker.results.complete(
        ResultRecord(
            request_id=m.request_id,
            tenant="acme",
            model=m.model,
            version=m.version,
            status="done",
            outputs=[{"class": 7}],
            created_at=m.enqueued_at,
            completed_at=time.time(),
            expires_at=int(m.expires_at),
        )
    )
    again = predict(client, {"inputs": [IMAGE]}, idem="s")
    assert again.status_code == 200
    assert again.json()["request_id"] == m.request_id
    assert again.json()["outputs"] == [{"class": 7}]
    assert len(worker.visible) == 1


def test_a_request_that_was_not_enqueued_gives_its_key_back(world):
    client, worker = world
    worker.fail_next = True
    failed = predict(client, {"inputs": [IMAGE]}, idem="retry-me")
    assert failed.status_code == 500
    retried = predict(client, {"inputs": [IMAGE]}, idem="retry-me")
    assert retried.status_code == 200, retried.text
    assert retried.json()["request_id"] != failed.json().get("request_id")
    assert "Idempotent-Replayed" not in retried.headers
    assert worker.runs == 1


def infer(client, body, idem, raw: bytes = b""):
    """A /v2 infer: JSON, or the JSON header followed by ``raw`` input bytes."""
    header = json.dumps(body).encode()
    hdrs = {"x-api-key": "k-acme", "Idempotency-Key": idem}
    if raw:
        hdrs["Inference-Header-Content-Length"] = str(len(header))
        hdrs["content-type"] = "application/octet-stream"
    else:
        hdrs["content-type"] = "application/json"
    return client.post("/v2/models/digits-cnn/infer", content=header + raw, headers=hdrs)


def test_a_protocol_infer_retried_with_its_key_is_the_first_again(world):
    client, worker = world
    tensor = {"name": "input", "datatype": "FP32", "shape": [1, 64]}
    body = {"inputs": [{**tensor, "data": [1.0] * 64}], "outputs": [{"name": "class"}]}
    # GIVEN an infer answered with an Idempotency-Key
    first = infer(client, body, "infer-1")
    assert first.status_code == 200, first.text
    # WHEN it is retried: the same answer, marked a replay, nothing run again
    again = infer(client, body, "infer-1")
    assert again.status_code == 200, again.text
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert again.json()["outputs"] == first.json()["outputs"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert worker.runs == 1
    # AND the same key with other elements is refused, naming the key, in the
    # protocol's shape; nothing is sent
    other = {**body, "inputs": [{**tensor, "data": [2.0] * 64}]}
    refused = infer(client, other, "infer-1")
    assert refused.status_code == 422
    assert "infer-1" in refused.json()["error"] and "Idempotency-Key" in refused.json()["error"]
    assert len(worker.visible) == 1


def test_a_binary_infer_is_told_apart_by_its_bytes(world):
    client, worker = world
    tensor = {
        "name": "input",
        "datatype": "FP32",
        "shape": [1, 64],
        "parameters": {"binary_data_size": 256},
    }
    body = {"inputs": [tensor], "outputs": [{"name": "class"}]}
    ones, twos = bytes(struct.pack("<64f", *[1.0] * 64)), bytes(struct.pack("<64f", *[2.0] * 64))
    assert infer(client, body, "bin-1", ones).status_code == 200
    assert infer(client, body, "bin-1", ones).headers["Idempotent-Replayed"] == "true"
    # the same JSON header with other tensor bytes is another request
    assert infer(client, body, "bin-1", twos).status_code == 422
    assert worker.runs == 1


def test_the_rule_on_its_store():
    # GIVEN one tenant's key claimed by a request
    keys = IdempotencyKeys(InMemoryKeyStore())
    body = fingerprint("predict digits-cnn", {"inputs": [[1]]})
    use = KeyUse("acme", "k", body, "r1", expires_at=100)
    assert keys.claim(use, now=10) is None
    # WHEN a second request claims it: the first's use, its body the same
    assert keys.claim(KeyUse("acme", "k", body, "r2", 100), now=11).request_id == "r1"
    # another body is refused; another tenant's key is its own
    other = fingerprint("predict digits-cnn", {"inputs": [[2]]})
    with pytest.raises(KeyReused):
        keys.claim(KeyUse("acme", "k", other, "r3", 100), now=12)
    assert keys.claim(KeyUse("globex", "k", other, "r4", 100), now=12) is None
    # past its TTL, or given back, the key is free again
    assert keys.claim(KeyUse("acme", "k", other, "r5", 200), now=100) is None
    keys.release(KeyUse("acme", "k", other, "r5", 200))
    assert keys.earlier("acme", "k", body, now=101) is None
