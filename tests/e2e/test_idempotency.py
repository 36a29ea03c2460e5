"""Idempotency-Key on the running platform: a retry is the first request again."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

from harness.waiting import wait_for
from harness.worker_log import delivery_events
from tests.e2e.test_api import DIGIT_ZERO, auth

MODELS = ("digits-cnn", "minilm-embed")


def stored(platform) -> list[str]:
    """The request ids of every result digits-cnn's workers have stored, in order (a
    second run of the request would be theirs; other models' work, still draining
    from other tests, is not)."""
    events = delivery_events(platform.log_events("worker-digits-cnn-*.log"))
    return [e["request_id"] for e in events if e.get("message") == "result stored"]


def test_two_posts_with_one_key_give_one_request_id_and_one_run(platform, http):
    # GIVEN idle queues and the workers' stored results so far
    for model in MODELS:
        platform.wait_until_idle(model)
    before = len(stored(platform))
    headers = {**auth(platform), "Idempotency-Key": f"order-{uuid.uuid4()}"}
    body = {"inputs": [DIGIT_ZERO]}

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=platform.url, timeout=60) as client:
            return client.post("/v1/models/digits-cnn/predict", json=body, headers=headers)

    # WHEN two POSTs with one key race, and the caller retries once more after
    with ThreadPoolExecutor(2) as pool:
        raced = list(pool.map(post, range(2)))
    retried = post(2)
    # THEN all three are one request: one id, one answer
    answers = [r.json() for r in (*raced, retried)]
    assert [r.status_code for r in (*raced, retried)] == [200, 200, 200], answers
    request_id = answers[0]["request_id"]
    assert {a["request_id"] for a in answers} == {request_id}
    assert all(a["outputs"] == answers[0]["outputs"] for a in answers)
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in raced) == 1
    assert retried.headers["Idempotent-Replayed"] == "true"
    # AND the same key with another body is refused, naming the key
    other = http.post(
        "/v1/models/digits-cnn/predict", json={"inputs": [DIGIT_ZERO] * 2}, headers=headers
    )
    assert other.status_code == 422, other.text
    assert other.json()["code"] == "idempotency_key_reused"
    assert [e["field"] for e in other.json()["errors"]] == ["Idempotency-Key"]
    # AND the workers ran and stored it once: no other result since
    wait_for(lambda: request_id in stored(platform), 30, 0.1, what="its stored result's log line")
    for model in MODELS:
        platform.wait_until_idle(model)
    assert stored(platform)[before:] == [request_id]
    # AND its record is that one answer, charged once
    record = http.get(f"/v1/requests/{request_id}", headers=auth(platform)).json()
    assert record["status"] == "done" and record["outputs"] == answers[0]["outputs"]
    assert record["cost"] == answers[0]["cost"]


def test_a_job_posted_twice_with_one_key_is_one_job(platform, http):
    headers = {**auth(platform), "Idempotency-Key": f"job-{uuid.uuid4()}"}
    body = {"model": "minilm-embed", "inputs": [f"replayed job line {i}" for i in range(6)]}

    def jobs() -> list[str]:
        listed = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform)).json()
        return [j["job_id"] for j in listed["jobs"]]

    before = jobs()
    # WHEN a job is submitted, and the same submission is retried with its key
    first = http.post("/v1/jobs", json=body, headers=headers)
    again = http.post("/v1/jobs", json=body, headers=headers)
    # THEN the retry is the first job, marked a replay
    assert first.status_code == 202, first.text
    assert again.status_code == 202, again.text
    job_id = first.json()["job_id"]
    assert again.json()["job_id"] == job_id
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    # AND the same key with other inputs is refused, naming the key
    other = http.post("/v1/jobs", json={**body, "inputs": ["another"]}, headers=headers)
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    # AND there is one new job, which runs its six lines once
    assert [j for j in jobs() if j not in before] == [job_id]

    def succeeded() -> dict | None:
        view = http.get(f"/v1/jobs/{job_id}", headers=auth(platform)).json()
        return view if view["status"] == "succeeded" else None

    done = wait_for(succeeded, 120, 0.2, what="the replayed job's end")
    assert done["counts"]["total"] == done["counts"]["done"] == 6
