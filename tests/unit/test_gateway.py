"""The local platform's stand-in for API Gateway's usage-plan limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from fastapi.testclient import TestClient

from switchyard_local.gateway import QUOTA_EXCEEDED, THROTTLED, Plan, UsageMeter, UsagePlanGate


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


def gated(plans: dict[str, Plan], clocks: Clocks) -> tuple[TestClient, list[str]]:
    app = FastAPI()
    reached: list[str] = []

    @app.get("/v1/models")
    def models() -> dict[str, str]:
        reached.append("models")
        return {"ok": "yes"}

    gate = UsagePlanGate(app, plans.get, meter(clocks))
    return TestClient(gate), reached


def test_a_call_over_the_limit_gets_apigateways_429_and_never_reaches_the_router():
    clocks = Clocks()
    client, reached = gated({"k": Plan(rate=1, burst=2)}, clocks)
    statuses = [client.get("/v1/models", headers={"x-api-key": "k"}) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[2].json() == {"message": "Too Many Requests"}
    assert reached == ["models", "models"]


def test_calls_without_a_planned_key_go_on_to_the_router_which_judges_the_key():
    clocks = Clocks()
    client, reached = gated({}, clocks)
    for headers in ({}, {"x-api-key": "not-in-a-plan"}):
        assert [client.get("/v1/models", headers=headers).status_code for _ in range(3)] == [
            200
        ] * 3
    assert len(reached) == 6
