"""A request whose every attempt fails ends as an error, its message in the DLQ;
`switchyard dlq list` shows it and `switchyard dlq redrive` gives it another go."""

from __future__ import annotations

import json

from harness.waiting import wait_for
from tests.e2e.accounting import submit_pinned
from tests.e2e.test_faults import wait_all_done
from tests.e2e.test_rollouts import FAULTY, cli

EXHAUSTED_LOG = "retries exhausted; the message goes to the DLQ"


def listed(platform, request_id: str, timeout: float = 60) -> dict:
    """The request's row in `switchyard dlq list`, once SQS has moved its message
    (on the receive after the last allowed one)."""

    def its_row() -> dict | None:
        out = cli(platform, "dlq", "list", "digits-cnn", "--json").stdout
        rows = [row for row in json.loads(out) if row["request_id"] == request_id]
        if rows:
            assert len(rows) == 1, rows
            return rows[0]
        return None

    return wait_for(
        its_row, timeout_s=timeout, every_s=1, what=f"{request_id} never reached the DLQ"
    )


def exhausted_events(platform, request_id: str) -> int:
    return sum(
        1
        for e in platform.worker_log_events()
        if e.get("message") == EXHAUSTED_LOG and e.get("request_id") == request_id
    )


def test_a_request_that_always_fails_is_listed_in_the_dlq_and_redriven(platform, http):
    # GIVEN a version that fails on every call, and a request pinned to it
    cli(platform, "models", "register", "digits-cnn", "dlq-faulty", "--artifact", str(FAULTY))
    request_id = submit_pinned(platform, http, "dlq-faulty")["request_id"]
    max_receives = platform.info["settings"]["max_receive_count"]

    # WHEN every allowed attempt has failed
    final = wait_all_done(platform, [request_id], timeout=120)[request_id]

    # THEN the request ends as an error, and its message sits in the DLQ, listed
    # with its request, tenant, version, receives and last error
    assert final["status"] == "error", final
    assert final["error"]["code"] == "retries_exhausted"
    row = listed(platform, request_id)
    assert row["lane"] == "realtime"
    assert row["tenant"] == platform.info["default_tenant"]
    assert row["version"] == "dlq-faulty"
    assert row["receives"] == max_receives
    assert row["status"] == "error"
    assert row["last_error"] == final["error"]["message"]
    assert row["last_error"].startswith(f"failed after {max_receives} attempts")
    table = cli(platform, "dlq", "list", "digits-cnn", "--lane", "realtime").stdout
    assert request_id in table and "dlq-faulty" in table
    assert exhausted_events(platform, request_id) == 1

    # WHEN the operator redrives the model's realtime DLQ
    out = cli(platform, "dlq", "redrive", "digits-cnn", "--lane", "realtime", "--json").stdout

    # THEN the message went back to work and the request is open again ...
    report = json.loads(out)["realtime"]
    assert report["moved"] >= 1 and report["reopened"] >= 1
    headers = {"x-api-key": platform.api_key}
    assert http.get(f"/v1/requests/{request_id}", headers=headers).json()["status"] == "queued"
    assert request_id not in cli(platform, "dlq", "list", "digits-cnn").stdout
    # ... so a worker tries it again, every allowed time, and it ends as before
    final = wait_all_done(platform, [request_id], timeout=120)[request_id]
    assert final["status"] == "error" and final["error"]["code"] == "retries_exhausted"
    assert listed(platform, request_id)["receives"] == max_receives
    assert exhausted_events(platform, request_id) == 2
