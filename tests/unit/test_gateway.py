"""The local platform's stand-in for API Gateway: key check, usage-plan limits, and
the verified key's id in the request context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from switchyard.schemas import QUOTA_EXCEEDED, THROTTLED
from switchyard_local.gateway import (
    ApiGatewayStandIn,
    ApiKey,
    EmulatorKeys,
    Plan,
    UsageMeter,
    stage_throttle,
)


class Clocks:
    def __init__(self) -> None:
        self.now = 0.0
        self.day = datetime(2026, 11, 22, 23, 0, tzinfo=UTC)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.day += timedelta(seconds=seconds)


def meter(clocks: Clocks) -> UsageMeter:
    return UsageMeter(clock=lambda: clocks.now, wall=lambda: clocks.day)


def test_a_burst_is_allowed_then_calls_come_at_the_rate():
    clocks = Clocks()
    m = meter(clocks)
    plan = Plan(rate=2, burst=5)
    assert [m.admit("k", plan) for _ in range(7)] == [None] * 5 + [THROTTLED] * 2
    clocks.advance(1.0)  # two more tokens
    assert [m.admit("k", plan) for _ in range(3)] == [None, None, THROTTLED]
    clocks.advance(60)  # the bucket refills to its size, no more
    assert [m.admit("k", plan) for _ in range(6)] == [None] * 5 + [THROTTLED]


def test_keys_are_metered_apart():
    clocks = Clocks()
    m = meter(clocks)
    plan = Plan(rate=1, burst=1)
    assert m.admit("noisy", plan) is None and m.admit("noisy", plan) == THROTTLED
    assert m.admit("quiet", plan) is None


def test_the_quota_ends_calls_until_the_next_period_and_throttled_calls_do_not_count():
    clocks = Clocks()
    m = meter(clocks)
    plan = Plan(rate=1, burst=2, quota=3, period="DAY")
    assert [m.admit("k", plan) for _ in range(3)] == [None, None, THROTTLED]
    clocks.advance(1.0)
    assert m.admit("k", plan) is None  # the third counted call
    clocks.advance(10)
    assert m.admit("k", plan) == QUOTA_EXCEEDED
    clocks.advance(3600)  # past midnight UTC: a new day, a new quota
    assert m.admit("k", plan) is None


def gated(keys: dict[str, ApiKey], clocks: Clocks) -> tuple[TestClient, list[dict]]:
    app = FastAPI()
    reached: list[dict] = []

    @app.get("/v1/models")
    def models(request: Request) -> dict[str, str]:
        reached.append(request.scope.get("aws.event", {}))
        return {"ok": "yes"}

    @app.get("/healthz")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    gate = ApiGatewayStandIn(app, keys.get, meter(clocks))
    return TestClient(gate), reached


def test_a_call_over_the_limit_gets_the_gateways_429_and_never_reaches_the_router():
    clocks = Clocks()
    client, reached = gated({"k": ApiKey("id-k", Plan(rate=1, burst=2))}, clocks)
    statuses = [client.get("/v1/models", headers={"x-api-key": "k"}) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[2].json() == {
        "message": "Too many requests for this API key's usage plan",
        "code": "throttled",
    }
    assert len(reached) == 2


def test_the_router_learns_the_verified_keys_id_never_its_value_alone():
    client, reached = gated({"secret-value": ApiKey("id-123", None)}, Clocks())
    assert client.get("/v1/models", headers={"x-api-key": "secret-value"}).status_code == 200
    assert reached[0]["requestContext"]["identity"]["apiKeyId"] == "id-123"


def test_calls_without_a_known_key_are_refused_at_the_gateway():
    client, reached = gated({"k": ApiKey("id-k", None)}, Clocks())
    # No key at all: the key authorizer's 401; a key it does not know: 403.
    for headers, status, code in (
        ({}, 401, "unauthorized"),
        ({"x-api-key": ""}, 401, "unauthorized"),
        ({"authorization": "Bearer "}, 401, "unauthorized"),
        ({"authorization": "Basic k"}, 401, "unauthorized"),
        ({"x-api-key": "not-a-key"}, 403, "forbidden"),
        ({"authorization": "Bearer not-a-key"}, 403, "forbidden"),
    ):
        response = client.get("/v1/models", headers=headers)
        assert response.status_code == status, headers
        assert response.json()["code"] == code
    assert reached == []


def test_a_bearer_key_is_a_key_like_x_api_key():
    client, reached = gated({"secret-value": ApiKey("id-123", None)}, Clocks())
    response = client.get("/v1/models", headers={"authorization": "Bearer secret-value"})
    assert response.status_code == 200
    assert reached[0]["requestContext"]["identity"]["apiKeyId"] == "id-123"
    # The local server's own pages need no key (API Gateway does not route them).
    assert client.get("/healthz").status_code == 200


class FakeApiGateway:
    """API Gateway's key and usage-plan reads, as the emulator answers them."""

    def __init__(self) -> None:
        self.keys = [{"id": "a1", "value": "va", "enabled": True}]
        self.loads = 0

    def get_paginator(self, operation: str):  # noqa: ANN201
        api = self

        class Pages:
            def paginate(self, **_: object):  # noqa: ANN202
                if operation == "get_api_keys":
                    api.loads += 1
                    return [{"items": list(api.keys)}]
                return [{"items": [{"id": "p1", "throttle": {"rateLimit": 5, "burstLimit": 9}}]}]

        return Pages()

    def get_usage_plan_keys(self, usagePlanId: str) -> dict:  # noqa: N803
        return {"items": [{"id": "a1"}]}


def test_emulator_keys_carry_their_plan_and_a_new_key_is_found_within_a_second():
    clocks = Clocks()
    api = FakeApiGateway()
    keys = EmulatorKeys(api, ttl_seconds=30, clock=lambda: clocks.now)
    assert keys.key_for("va") == ApiKey("a1", Plan(rate=5, burst=9))
    api.keys.append({"id": "b2", "value": "vb", "enabled": True})
    assert keys.key_for("vb") is None  # asked again within a second: no reload
    clocks.advance(1.0)
    assert keys.key_for("vb") == ApiKey("b2", None)
    loads = api.loads
    for _ in range(50):
        keys.key_for("flood")
    assert api.loads == loads  # a flood of bad keys does not reach the emulator


def test_the_stages_throttle_holds_every_key_together():
    # GIVEN a stage throttled at a burst of 3 (and no refill within the test), and
    # two tenants whose own plans allow far more
    clocks = Clocks()
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, str]:
        return {"ok": "yes"}

    roomy = Plan(rate=100, burst=100)
    keys = {"a": ApiKey("id-a", roomy), "b": ApiKey("id-b", roomy)}
    gate = ApiGatewayStandIn(app, keys.get, meter(clocks), stage=stage_throttle("0.001:3"))
    client = TestClient(gate)
    # WHEN they call in turn
    statuses = [client.get("/v1/models", headers={"x-api-key": k}).status_code for k in "ababa"]
    # THEN the stage answers three calls between them, then the gateway's 429
    assert statuses == [200, 200, 200, 429, 429]
    assert stage_throttle(None) is None and stage_throttle("") is None
