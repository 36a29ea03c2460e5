"""One tenant's backlog does not delay another tenant's requests to the same model:
the router sends each request with its tenant as the message group, the emulator
serves groups as SQS fair queues do (``switchyard_local.moto_fair``), and a worker
receives the quiet tenant's message ahead of the noisy one's backlog. How long the
quiet tenant waits is measured in ``bench/noisy_neighbour.py``; this test asserts the
order, from the request records' own stamps: when the router queued it
(``created_at``) and when a worker received it (``timings.received_at``)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import httpx

from harness.local_platform import RunningPlatform
from switchyard.payloads import S3PayloadStore
from switchyard.results import DynamoDBResultStore
from switchyard.schemas import ResultRecord

MODEL = "minilm-embed"
# acme's backlog: requests of 64 sentences, each a batch of the model's 64 inputs, so
# that it builds up faster than the workers drain it.
BACKLOG = 80
SENTENCES_PER_REQUEST = 64
QUIET_CALLS = 3
# Of acme's requests waiting in the queue when a globex call was sent, at least this
# many: the backlog it met.
MET_AT_LEAST = 10


def _submit_backlog(platform: RunningPlatform, key: str) -> list[str]:
    """acme's async predicts, all accepted (202) before the test goes on."""
    headers = {"x-api-key": key}

    def one(i: int) -> str:
        body = {"inputs": [f"acme backlog {i}.{j}" for j in range(SENTENCES_PER_REQUEST)]}
        with httpx.Client(base_url=platform.url, timeout=60) as http:
            response = http.post(
                f"/v1/models/{MODEL}/predict", params={"async": "true"}, json=body, headers=headers
            )
        assert response.status_code == 202, response.text
        return str(response.json()["request_id"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(BACKLOG)))


def _records(platform: RunningPlatform, tenant: str, ids: list[str]) -> list[ResultRecord]:
    settings = platform.info["settings"]
    payloads = S3PayloadStore(platform.client("s3"), settings["payloads_bucket"])
    store = DynamoDBResultStore(
        platform.client("dynamodb"), settings["results_table"], payloads, 8_192
    )
    found = [store.get(tenant, request_id) for request_id in ids]
    assert all(r is not None for r in found)
    return [r for r in found if r is not None]


def _received_at(record: ResultRecord) -> float:
    """When a worker received the request; never, for one cancelled while queued
    (acme's, once globex's calls are answered)."""
    return record.timings.get("received_at", math.inf)


def test_a_quiet_tenants_request_is_received_ahead_of_a_noisy_tenants_backlog(platform, http):
    keys = platform.keys
    # GIVEN acme's backlog of async work queued on minilm-embed
    backlog = _submit_backlog(platform, keys["acme"])
    try:
        # WHEN globex calls the same model sync, a few calls at once
        def call(i: int) -> httpx.Response:
            return http.post(
                f"/v1/models/{MODEL}/predict",
                json={"inputs": [f"globex call {i}"]},
                headers={"x-api-key": keys["globex"], "x-deadline-ms": "20000"},
            )

        with ThreadPoolExecutor(QUIET_CALLS) as pool:
            answers = list(pool.map(call, range(QUIET_CALLS)))
        # THEN each call is answered, not handed back to poll (202)
        for answer in answers:
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "done"
    finally:
        # acme's work is not left in front of the next test's requests
        for request_id in backlog:
            http.delete(f"/v1/requests/{request_id}", headers={"x-api-key": keys["acme"]})
        platform.wait_until_idle(MODEL)
    quiet = _records(platform, "globex", [a.json()["request_id"] for a in answers])
    noisy = _records(platform, "acme", backlog)
    assert {r.status for r in noisy} <= {"done", "cancelled"}
    # AND each globex request was received ahead of acme's work that was waiting in the
    # queue when globex's was sent (first in, first out, it would have come after all
    # of it): of acme's requests queued before it and not yet received, more than
    # half were received after it, or were still queued when cancelled after it
    for call in quiet:
        waiting = [
            r for r in noisy if r.created_at < call.created_at < _received_at(r)
        ]  # fmt: skip
        after = [r for r in waiting if _received_at(r) > _received_at(call)]
        assert len(waiting) >= MET_AT_LEAST, len(waiting)  # it met a backlog
        assert len(after) > len(waiting) / 2, (len(after), len(waiting))
