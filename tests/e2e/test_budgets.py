"""Tenants' monthly budgets on the local platform: a tenant over its budget gets 429
``budget_exceeded`` (its predicts, its jobs) while another tenant is answered; one
command raises the budget and the next request goes through. A tenant whose manifest
says ``over_budget = "batch"`` has its realtime work moved to the batch lane instead,
where a worker still answers it.

The budgets are lowered to 0 with ``switchyard budget set`` (a budget of 0 is used
up from the start) and given back to the manifest's at the end."""

from __future__ import annotations

import json

import pytest

from harness.waiting import wait_for
from switchyard.results import DynamoDBResultStore
from tests.e2e.test_api import DIGIT_ZERO, auth

MODEL = "digits-cnn"


def predict(http, platform, tenant: str):
    return http.post(
        f"/v1/models/{MODEL}/predict", json={"inputs": [DIGIT_ZERO]}, headers=auth(platform, tenant)
    )


def set_budget(platform, tenant: str, usd: str | None) -> None:
    args = ("budget", "set", tenant, usd) if usd is not None else ("budget", "reset", tenant)
    done = platform.cli(*args)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def budgets_reset(platform):
    yield
    for tenant in ("acme", "globex"):
        set_budget(platform, tenant, None)


def test_over_its_budget_a_tenant_is_refused_until_the_budget_is_raised(
    platform, http, budgets_reset
):
    # GIVEN globex under its budget
    assert predict(http, platform, "globex").status_code == 200
    # WHEN the operator lowers its budget to nothing
    set_budget(platform, "globex", "0")
    # THEN its requests are refused (a router remembers "under budget" a few seconds)
    refused = wait_for(
        lambda: (r := predict(http, platform, "globex")).status_code == 429 and r,
        30,
        what="globex's predict refused over its budget",
    )
    body = refused.json()
    assert body["code"] == "budget_exceeded", body
    assert "globex" in body["message"] and "budget" in body["message"]
    assert 0 < int(refused.headers["Retry-After"]) <= 31 * 86_400  # the month's end
    job = http.post(
        "/v1/jobs",
        json={"model": "minilm-embed", "inputs": ["a budget"]},
        headers=auth(platform, "globex"),
    )
    assert job.status_code == 429 and job.json()["code"] == "budget_exceeded", job.text
    # AND another tenant's request to the same model is answered
    assert predict(http, platform, "acme").status_code == 200
    # AND `switchyard budget show` and `switchyard status` flag it
    shown = json.loads(platform.cli("budget", "show", "--json").stdout)["budgets"]
    assert {b["tenant"]: b["over"] for b in shown}["globex"] is True
    status = platform.cli("status").stdout
    flags = status[status.index("budgets, ") :].splitlines()
    assert any("globex" in line and "OVER" in line for line in flags), status
    assert any("acme" in line and "OVER" not in line for line in flags), status

    # WHEN the operator raises it again
    set_budget(platform, "globex", "500")
    # THEN the very next request goes through
    answered = predict(http, platform, "globex")
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "done"


def test_over_its_budget_a_batch_tenants_work_waits_in_the_batch_lane(
    platform, http, budgets_reset
):
    # GIVEN acme, whose manifest moves its work to the batch lane over its budget
    set_budget(platform, "acme", "0")
    moved = wait_for(
        lambda: (r := predict(http, platform, "acme")).status_code == 202 and r,
        30,
        what="acme's predict moved to the batch lane",
    )
    # THEN it is queued, not refused, and a worker answers it from the batch lane
    location = moved.headers["Location"]
    done = wait_for(
        lambda: (
            (r := http.get(location, headers=auth(platform, "acme"))).json()["status"] == "done"
            and r
        ),
        60,
        what="acme's batch-lane request answered",
    )
    assert done.json()["outputs"]
    table = platform.info["settings"]["results_table"]
    record = DynamoDBResultStore(platform.client("dynamodb"), table, None, 8_192).get(
        "acme", moved.json()["request_id"]
    )
    assert record is not None and record.lane == "batch"
