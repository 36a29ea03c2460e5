"""Workers die; requests do not. Every accepted request gets exactly one result."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

SENTENCES = [f"sentence number {i} about trains, yards and switches" for i in range(16)]


def submit_async(platform, count: int) -> list[str]:
    headers = {"x-api-key": platform.api_key}

    def one(i: int) -> str:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            response = client.post(
                "/v1/models/minilm-embed/predict?async=true",
                json={"inputs": SENTENCES[: 4 + i % 8]},
                headers=headers,
            )
            assert response.status_code == 202, response.text
            return response.json()["request_id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(count)))


def wait_all_done(platform, ids: list[str], timeout: float) -> dict[str, dict]:
    headers = {"x-api-key": platform.api_key}
    deadline = time.monotonic() + timeout
    done: dict[str, dict] = {}
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        while len(done) < len(ids):
            assert time.monotonic() < deadline, f"{len(ids) - len(done)} requests never finished"
            for rid in ids:
                if rid not in done:
                    body = client.get(f"/v1/requests/{rid}", headers=headers).json()
                    if body["status"] != "queued":
                        done[rid] = body
            time.sleep(0.2)
    return done


def stored_per_request(platform) -> Counter:
    return Counter(
        e["request_id"] for e in platform.worker_log_events() if e.get("message") == "result stored"
    )


def signal_worker_under_load(platform, requests: int, after: int, sig: int) -> tuple[list, int]:
    """Submit ``requests``; once ``after`` results are stored, signal the worker while
    it holds the rest. Returns the request ids and the signalled worker's pid."""
    ids = submit_until_stored(platform, requests, after)
    victim = platform.worker_pid("minilm-embed")
    os.kill(victim, sig)
    return ids, victim


def submit_until_stored(platform, requests: int, after: int) -> list[str]:
    """Submit ``requests`` and return their ids once ``after`` results are stored."""
    ids = submit_async(platform, requests)
    deadline = time.monotonic() + 60
    while sum(stored_per_request(platform)[rid] for rid in ids) < after:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return ids


def in_flight(platform, model: str) -> int:
    url = platform.info["queues"][model]["realtime"]
    attrs = platform.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessagesNotVisible"])


def kill_worker_holding_messages(platform, requests: int, after: int) -> tuple[list, int]:
    """Submit ``requests``; once ``after`` results are stored, freeze the worker, and
    kill it only if it holds received, undeleted messages (otherwise let it run on
    and look again), so the kill always lands on work in flight."""
    ids = submit_until_stored(platform, requests, after)
    victim = platform.worker_pid("minilm-embed")
    deadline = time.monotonic() + 60
    while True:
        os.kill(victim, signal.SIGSTOP)
        if in_flight(platform, "minilm-embed") > 0:
            os.kill(victim, signal.SIGKILL)
            return ids, victim
        os.kill(victim, signal.SIGCONT)
        assert time.monotonic() < deadline, "the worker never held a message to kill it with"
        time.sleep(0.02)


def test_sigkill_mid_batch_under_load_loses_nothing_and_duplicates_nothing(platform):
    ids, victim = kill_worker_holding_messages(platform, 120, after=10)

    results = wait_all_done(platform, ids, timeout=120)

    assert all(r["status"] == "done" for r in results.values())
    assert all(len(r["outputs"]) == 4 + i % 8 for i, r in enumerate(results[rid] for rid in ids))
    # Each result was written once. A worker logs "result stored" after its batch's
    # writes, so the killed worker may have written a result and died before saying
    # so; then the redelivery found it stored ("duplicate suppressed").
    stored = stored_per_request(platform)
    events = platform.worker_log_events()
    suppressed = {e["request_id"] for e in events if e.get("message") == "duplicate suppressed"}
    assert all(stored[rid] <= 1 for rid in ids), "a result was written twice"
    assert [rid for rid in ids if stored[rid] == 0 and rid not in suppressed] == []
    # The kill caught messages in flight: some were delivered again, and either
    # answered then or found already answered (killed between write and delete).
    redelivered = [
        e
        for e in events
        if e.get("message") in ("result stored", "duplicate suppressed")
        and e.get("request_id") in ids
        and e.get("receive_count", 1) > 1
    ]
    assert redelivered, "the kill did not interrupt any message in flight"
    assert platform.queue_depth("minilm-embed", dlq=True) == 0
    assert platform.queue_depth("minilm-embed") == 0
    assert platform.worker_pid("minilm-embed") != victim  # replaced, as ECS would


def test_sigterm_drains_the_worker_and_releases_what_it_has_not_started(platform):
    ids, victim = signal_worker_under_load(platform, 60, after=5, sig=signal.SIGTERM)

    results = wait_all_done(platform, ids, timeout=120)

    assert all(r["status"] == "done" for r in results.values())
    stopped = [
        e
        for e in platform.worker_log_events()
        if e.get("message") == "stopped" and e.get("worker", "").endswith(f"-{victim}")
    ]
    assert len(stopped) == 1, "the worker did not log a clean stop"
    assert "worker-minilm-embed-0 exited with 0; starting a new one" in platform.output
    stored = stored_per_request(platform)
    assert {rid: stored[rid] for rid in ids} == {rid: 1 for rid in ids}
    assert platform.queue_depth("minilm-embed", dlq=True) == 0
