"""Every request ends: done, error, expired or cancelled. Pinned versions, final
errors after the last retry, and cancellation, on the running platform."""

from __future__ import annotations

import httpx

from tests.e2e.accounting import submit_pinned
from tests.e2e.test_api import DIGIT_ZERO
from tests.e2e.test_faults import submit_async, wait_all_done
from tests.e2e.test_rollouts import FAULTY, cli


def wait_final(platform, request_id: str, timeout: float) -> dict:
    return wait_all_done(platform, [request_id], timeout)[request_id]


def test_a_pinned_request_goes_to_its_version_and_a_bad_pin_is_refused(platform, http):
    headers = {"x-api-key": platform.api_key}
    pinned = http.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [DIGIT_ZERO], "params": {"version": "v1"}},
        headers=headers,
    )
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["version"] == "v1" and pinned.json()["outputs"][0]["class"] == 0
    unknown = http.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [DIGIT_ZERO]},
        headers={**headers, "x-model-version": "v404"},
    )
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "unknown_version" and "v404" in unknown.json()["message"]


def test_a_request_pinned_to_a_version_that_always_fails_ends_as_error(platform, http):
    cli(platform, "models", "register", "digits-cnn", "pinned-faulty", "--artifact", str(FAULTY))
    accepted = submit_pinned(platform, http, "pinned-faulty")
    assert accepted["version"] == "pinned-faulty"
    request_id = accepted["request_id"]
    # Every allowed receive, with backoffs between them; the last writes the final error.
    attempts = platform.info["settings"]["max_receive_count"]
    final = wait_final(platform, request_id, timeout=120)
    assert final["status"] == "error", final
    assert final["error"]["code"] == "retries_exhausted"
    assert final["error"]["message"].startswith(f"failed after {attempts} attempts")
    assert final["version"] == "pinned-faulty"  # no fallback for a pinned request


def test_a_request_that_has_not_run_is_cancelled_and_never_runs(platform):
    headers = {"x-api-key": platform.api_key}
    # A backlog of several seconds' work (more than the worker drains while it is
    # sent: 1,440 sentences), then one more request, cancelled at once.
    backlog = submit_async(platform, 60, sentences=24)
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        last = client.post(
            "/v1/models/minilm-embed/predict?async=true",
            json={"inputs": ["the last one in the queue"]},
            headers=headers,
        ).json()["request_id"]
        cancelled = client.delete(f"/v1/requests/{last}", headers=headers)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        # Another tenant cannot see it, let alone cancel it.
        other = {"x-api-key": platform.keys["globex"]}
        assert client.delete(f"/v1/requests/{last}", headers=other).status_code == 404
    wait_all_done(platform, backlog, timeout=180)
    platform.wait_until_idle("minilm-embed")
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        assert client.get(f"/v1/requests/{last}", headers=headers).json()["status"] == "cancelled"
        # A request that already ran keeps its result.
        finished = client.delete(f"/v1/requests/{backlog[0]}", headers=headers)
        assert finished.status_code == 409
        assert finished.json()["code"] == "already_finished"
        assert finished.json()["status"] == "done" and finished.json()["outputs"]
    events = [e for e in platform.worker_log_events() if e.get("request_id") == last]
    assert [e["message"] for e in events] == ["cancelled; deleted without running"], events
    assert platform.queue_depth("minilm-embed") == 0
