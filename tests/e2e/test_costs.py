"""Cost per request on the running platform: each answer carries its cost, and
`switchyard costs` (the workers' ledger in the results table, read over the
emulator's wire) lists both demo tenants with worker and AWS shares, the requests'
worker shares plus the workers' idle time making up their running time."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from harness.waiting import wait_for
from switchyard.settings import WorkerSettings
from tests.e2e.test_api import DIGIT_ZERO, PATIENT_MS

MODEL = "digits-cnn"
TENANTS = ("acme", "globex")
EACH = 4  # sync requests per tenant, plus one async
METER_SECONDS = WorkerSettings.model_fields["meter_seconds"].default


def costs(platform) -> dict[str, Any]:
    result = platform.cli("costs", "--by", "tenant", "--since", "1d", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def settled(platform) -> dict[str, Any]:
    """The ledger once the workers have written all they ran: two reads a meter
    turn apart (``WorkerSettings.meter_seconds``) that agree on the workers' busy and
    billed seconds. A request run just before may have its busy time written in one
    turn and its cost, stored a moment later, in the next."""

    def steady() -> dict[str, Any] | None:
        first = costs(platform)
        time.sleep(METER_SECONDS + 1)
        second = costs(platform)
        keys = ("busy_seconds", "billed_seconds")
        return second if all(first["workers"][k] == second["workers"][k] for k in keys) else None

    return wait_for(steady, 60, every_s=0.0, what="the ledger never settled")


def test_requests_carry_their_cost_and_costs_lists_each_tenant(platform):
    # GIVEN the ledger as it stands, with what earlier tests ran written
    before = settled(platform)
    # WHEN each demo tenant sends sync requests and one async request
    request_ids: dict[str, str] = {}
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        for tenant in TENANTS:
            headers = {"x-api-key": platform.keys[tenant], "x-deadline-ms": PATIENT_MS}
            for _ in range(EACH):
                answer = client.post(
                    f"/v1/models/{MODEL}/predict", json={"inputs": [DIGIT_ZERO]}, headers=headers
                )
                assert answer.status_code == 200, answer.text
                # THEN a sync answer carries its cost: worker time and AWS requests
                cost = answer.json()["cost"]
                assert cost["worker_seconds"] > 0 and cost["worker_usd"] > 0
                assert cost["aws"]["apigateway"] > 0 and cost["aws"]["sqs"] > 0
                assert cost["usd"] == pytest.approx(cost["worker_usd"] + cost["aws_usd"])
            queued = client.post(
                f"/v1/models/{MODEL}/predict?async=true",
                json={"inputs": [DIGIT_ZERO]},
                headers=headers,
            )
            assert queued.status_code == 202, queued.text
            request_ids[tenant] = queued.json()["request_id"]
        # AND the async request's record carries its cost once done
        for tenant, request_id in request_ids.items():
            headers = {"x-api-key": platform.keys[tenant]}

            def done(request_id: str = request_id, headers: dict[str, str] = headers) -> Any:
                body = client.get(f"/v1/requests/{request_id}", headers=headers).json()
                return body if body["status"] == "done" else None

            record = wait_for(done, 30, every_s=0.2, what=f"{request_id} never done")
            assert record["cost"]["worker_usd"] > 0 and record["cost"]["aws"]["dynamodb"] > 0
            assert record["cost"]["aws"]["apigateway"] > record["cost"]["aws"]["sqs"] > 0

    # THEN once the workers have written their ledger, `switchyard costs` lists both
    # tenants with worker and AWS shares, and this traffic's worker shares are the
    # busy time the workers wrote for it
    def written() -> dict[str, Any] | None:
        after = costs(platform)
        if not all(t in after["groups"] for t in TENANTS):
            return None
        added = {
            t: after["groups"][t]["requests"] - before["groups"].get(t, {}).get("requests", 0)
            for t in TENANTS
        }
        if any(n < EACH + 1 for n in added.values()):
            return None
        billed = after["workers"]["billed_seconds"] - before["workers"]["billed_seconds"]
        busy = after["workers"]["busy_seconds"] - before["workers"]["busy_seconds"]
        return after if abs(billed - busy) <= 0.05 * busy else None

    # (a worker writes once a meter turn; one that stores a result just after a turn
    # writes its cost in the next)
    after = wait_for(
        written, 2 * METER_SECONDS + 5, every_s=1.0, what="the ledger never matched the traffic"
    )
    for tenant in TENANTS:
        group = after["groups"][tenant]
        assert group["worker_usd"] > 0 and group["aws_usd"] > 0
        assert group["usd"] == pytest.approx(group["worker_usd"] + group["aws_usd"])
    # AND the requests' worker shares plus the idle time are the running time (5 %)
    w = after["workers"]
    assert w["running_seconds"] > 0 and w["idle_seconds"] > 0
    assert abs(w["billed_seconds"] + w["idle_seconds"] - w["running_seconds"]) <= (
        0.05 * w["running_seconds"]
    )
