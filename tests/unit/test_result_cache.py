"""The result cache's rules: what is cacheable, how the router answers a repeat
without queueing it, and how the worker fills the cache."""

from __future__ import annotations

import json
import time

import pytest

from harness.fakes import (
    EchoRuntime,
    FakeQueue,
    FakeResultCache,
    FakeResults,
    version_record,
    worker_over_fakes,
)
from harness.router_app import predict_service, router_client
from switchyard.queues import ModelLanes
from switchyard.result_cache import CacheEntry, cache_key, cacheable
from switchyard.schemas import QueueMessage

KEYS = {"k-acme": "acme", "k-globex": "globex"}
IMAGE = [1] * 64
OTHER = [2] * 64


def test_the_key_is_the_inputs_canonical_json():
    assert cache_key([{"a": 1, "b": [1.5, 2]}]) == cache_key([{"b": [1.5, 2], "a": 1}])
    assert cache_key(["a"]) != cache_key(["a "]) != cache_key([["a"]])
    assert len(cache_key(["a"])) == 64


@pytest.mark.parametrize(
    ("seconds", "inputs", "generative", "expected"),
    [
        (3600, ["text"], False, True),
        (0, ["text"], False, False),  # the model declares no cache time
        (3600, [{"prompt": "p", "temperature": 0}], True, True),  # greedy
        (3600, [{"prompt": "p", "temperature": 0.8, "seed": 7}], True, True),
        (3600, [{"prompt": "p", "temperature": 0.8}], True, False),  # sampled, no seed
        (3600, [{"prompt": "p", "temperature": 0, "stream": True}], True, False),
    ],
)
def test_what_may_be_cached(seconds, inputs, generative, expected):
    assert cacheable(seconds, inputs, generative) is expected


def router_world(record):
    """A router serving ``record``'s model with a result cache, over fakes: its test
    client, realtime queue, results and cache."""
    results, cache = FakeResults(), FakeResultCache()
    queue = FakeQueue("realtime")
    lanes = {record.model: ModelLanes(realtime=queue, batch=FakeQueue("batch"))}
    service = predict_service(lanes, record, results=results, cache=cache, sleep=lambda _: None)
    return router_client(service, KEYS), queue, results, cache


@pytest.fixture
def world(digits_v1):
    return router_world(digits_v1)


def cached(cache, tenant="acme", inputs=(IMAGE,), outputs=({"class": 3},), expires_in=60):
    key = cache_key(list(inputs))
    cache.put(
        [CacheEntry(tenant, "digits-cnn", "v1", key, list(outputs), int(time.time() + expires_in))]
    )


def predict(client, inputs, key="k-acme", query="", **headers):
    return client.post(
        f"/v1/models/digits-cnn/predict{query}",
        json={"inputs": inputs},
        headers={"x-api-key": key, **headers},
    )


def seen_once(client, queue, inputs=(IMAGE,), key="k-acme"):
    """The router's first sight of these inputs (queued, never answered here)."""
    assert predict(client, list(inputs), key, **{"x-deadline-ms": "20"}).status_code == 202
    queue.visible.clear()


def test_inputs_new_to_the_router_cost_the_cache_nothing_and_are_cached_from_their_second_sight(
    world,
):
    client, queue, _, cache = world
    # WHEN acme asks for IMAGE for the first time
    first = predict(client, [IMAGE], **{"x-deadline-ms": "20"})
    # THEN the cache is neither read nor asked to be filled
    assert first.status_code == 202 and cache.log == []
    assert QueueMessage.model_validate_json(queue.visible.pop()["body"]).cache_key is None
    # WHEN globex asks for the same inputs: its first sight, not acme's second
    predict(client, [IMAGE], "k-globex", **{"x-deadline-ms": "20"})
    assert cache.log == [] and queue.visible.pop() is not None
    # WHEN acme asks again: a read (a miss) and the worker is asked to fill the entry
    second = predict(client, [IMAGE], **{"x-deadline-ms": "20"})
    assert second.status_code == 202 and [e[0] for e in cache.log] == ["get"]
    message = QueueMessage.model_validate_json(queue.visible.pop()["body"])
    assert message.cache_key == cache_key([IMAGE])
    # WHEN the entry is filled (as the worker does), the third sight is a hit
    cached(cache)
    third = predict(client, [IMAGE])
    assert third.status_code == 200 and third.headers["x-cache"] == "hit"
    assert queue.visible == []


def test_a_repeat_is_answered_from_the_cache_without_queueing(world):
    client, queue, results, cache = world
    # GIVEN acme's answer to IMAGE is cached, and the router has seen IMAGE before
    cached(cache)
    seen_once(client, queue)
    stored = dict(results.items)
    # WHEN acme asks again
    response = predict(client, [IMAGE])
    # THEN the cache answers, and nothing is queued or stored
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["outputs"] == [{"class": 3}] and body["status"] == "done"
    assert response.headers["x-cache"] == "hit"
    assert "cache_ms" in body["timings"]
    assert queue.visible == [] and results.items == stored


def test_a_miss_is_queued_with_its_key_for_the_worker(world):
    client, queue, _, cache = world
    cached(cache, tenant="globex")  # another tenant's entry is not acme's
    cached(cache, inputs=(OTHER,))
    seen_once(client, queue)
    client_timeout = predict(client, [IMAGE], **{"x-deadline-ms": "50"})
    assert client_timeout.status_code == 202  # no worker here: queued, then handed off
    assert "x-cache" not in client_timeout.headers
    message = QueueMessage.model_validate_json(queue.visible[0]["body"])
    assert message.cache_key == cache_key([IMAGE])


def test_no_cache_skips_the_lookup_but_still_fills_the_entry(world):
    client, queue, _, cache = world
    cached(cache)
    seen_once(client, queue)
    response = predict(client, [IMAGE], **{"cache-control": "no-cache", "x-deadline-ms": "50"})
    assert response.status_code == 202 and ("get", ("acme", "digits-cnn", "v1")) not in cache.log
    assert json.loads(queue.visible[0]["body"])["cache_key"] == cache_key([IMAGE])


def test_an_expired_entry_is_a_miss(world):
    client, queue, _, cache = world
    cached(cache, expires_in=-1)
    seen_once(client, queue)
    assert predict(client, [IMAGE], **{"x-deadline-ms": "50"}).status_code == 202
    assert len(queue.visible) == 1


def test_an_async_repeat_is_stored_done_and_read_back(world):
    client, queue, results, cache = world
    cached(cache)
    seen_once(client, queue)
    response = predict(client, [IMAGE], query="?async=true")
    assert response.status_code == 202 and response.json()["status"] == "done"
    location = response.headers["location"]
    read = client.get(location, headers={"x-api-key": "k-acme"}).json()
    assert read["status"] == "done" and read["outputs"] == [{"class": 3}]
    assert queue.visible == []
    # and it stays acme's
    assert client.get(location, headers={"x-api-key": "k-globex"}).status_code == 404


def test_a_model_without_a_cache_time_is_never_looked_up(digits_v1):
    cache = FakeResultCache()
    queue = FakeQueue("realtime")
    service = predict_service(
        {"digits-cnn": ModelLanes(realtime=queue, batch=FakeQueue("batch"))},
        digits_v1.model_copy(update={"result_cache_seconds": 0}),
        cache=cache,
    )
    for _ in range(3):  # past any sighting rule
        service.submit(
            model="digits-cnn", tenant="acme", inputs=[IMAGE], sticky_headers={}, deadline_ms=None
        )
    assert cache.log == []
    assert json.loads(queue.visible[0]["body"]).get("cache_key") is None


def test_the_worker_caches_what_it_answered_for_the_versions_time(digits_v1):
    # GIVEN two requests that asked to be cached, one that did not, one that fails
    realtime, cache, results = FakeQueue("realtime"), FakeResultCache(), FakeResults()
    worker = worker_over_fakes(
        digits_v1, EchoRuntime(), realtime=realtime, results=results, cache=cache
    )
    for rid, inputs, key in [
        ("r1", [IMAGE], cache_key([IMAGE])),
        ("r2", [OTHER, OTHER], cache_key([OTHER, OTHER])),
        ("r3", [IMAGE], None),
        ("r4", [[99] * 64], cache_key([[99] * 64])),  # over the signature's maximum
    ]:
        message = QueueMessage(
            request_id=rid,
            tenant="acme",
            model="digits-cnn",
            version="v1",
            inputs=inputs,
            n_inputs=len(inputs),
            enqueued_at=time.time(),
            expires_at=time.time() + 60,
            cache_key=key,
        )
        realtime.send(message.model_dump_json(), "acme")
    # WHEN the worker answers them
    for _ in range(5):
        worker.step()
    worker.loop.execute(worker.intake.assembler.take(force=True))
    worker.wait_for_results()
    # THEN the two done ones are cached, in one write, for the version's cache time
    assert results.items[("acme", "r4")].status == "error"
    assert ("put", 2) in cache.log and [e for e in cache.log if e[0] == "put"] == [("put", 2)]
    entry = cache.entries[("acme", "digits-cnn", "v1", cache_key([OTHER, OTHER]))]
    assert entry.outputs == [{"n": 64}, {"n": 64}]
    left = entry.expires_at - time.time()
    assert digits_v1.result_cache_seconds - 5 < left <= digits_v1.result_cache_seconds


def test_an_openai_embedding_answered_from_the_cache_says_so():
    # GIVEN acme's embedding of "a sentence" cached, and seen by the router before
    client, queue, _, cache = router_world(version_record("minilm-embed"))
    expires = int(time.time() + 60)
    key = cache_key(["a sentence"])
    cache.put([CacheEntry("acme", "minilm-embed", "v1", key, [[0.5, 0.25]], expires)])
    headers = {"Authorization": "Bearer k-acme", "x-deadline-ms": "20"}
    seen = client.post(
        "/v1/models/minilm-embed/predict", json={"inputs": ["a sentence"]}, headers=headers
    )
    assert seen.status_code == 202
    queue.visible.clear()
    # WHEN acme asks for it through the OpenAI-compatible API
    response = client.post(
        "/openai/v1/embeddings",
        json={"model": "minilm-embed", "input": "a sentence"},
        headers={"Authorization": "Bearer k-acme"},
    )
    # THEN the cache answers, and the answer says so, as a predict's does
    assert response.status_code == 200, response.text
    assert response.json()["data"][0]["embedding"] == [0.5, 0.25]
    assert response.headers["x-cache"] == "hit" and queue.visible == []
    # and no-cache skips it: queued for a worker (none here: a timeout)
    skipped = client.post(
        "/openai/v1/embeddings",
        json={"model": "minilm-embed", "input": "a sentence"},
        headers={"Authorization": "Bearer k-acme", "Cache-Control": "no-cache"},
    )
    assert "x-cache" not in skipped.headers and len(queue.visible) == 1
