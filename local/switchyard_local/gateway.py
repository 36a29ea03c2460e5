"""What API Gateway does in front of the router, for the local platform: each API
key's usage plan limits its calls (rate and burst as a token bucket, and a quota per
period), and a call over a limit gets 429 before it reaches the router.

moto keeps the usage plans that provisioning created but does not enforce them, so
this layer reads those same plans from the emulator and enforces them. The router
app inside is unchanged: in the cloud API Gateway does this, and the Lambda never
sees a throttled call. Calls without a key, or with a key in no plan, pass through
to the router, which answers 403.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What API Gateway answers, word for word, when a key is over its limits.
THROTTLED = "Too Many Requests"
QUOTA_EXCEEDED = "Limit Exceeded"


@dataclass(frozen=True)
class Plan:
    """One usage plan's limits, as API Gateway applies them to each of its keys."""

    rate: float  # requests per second, refilled continuously
    burst: int  # the bucket's size
    quota: int | None = None
    period: str = "DAY"  # DAY, WEEK or MONTH (UTC)


@dataclass
class _Meter:
    tokens: float
    refilled_at: float
    period: str = ""
    used: int = 0


@dataclass
class UsageMeter:
    """Token buckets and quota counters per key. Thread-safe; clocks injectable."""

    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _meters: dict[str, _Meter] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, key: str, plan: Plan) -> str | None:
        """None if the call may go on (and it is counted), else the refusal."""
        now = self.clock()
        period = _period_of(self.wall(), plan.period)
        with self._lock:
            meter = self._meters.get(key)
            if meter is None:
                meter = self._meters[key] = _Meter(tokens=float(plan.burst), refilled_at=now)
            meter.tokens = min(
                float(plan.burst), meter.tokens + (now - meter.refilled_at) * plan.rate
            )
            meter.refilled_at = now
            if meter.period != period:
                meter.period, meter.used = period, 0
            if plan.quota is not None and meter.used >= plan.quota:
                return QUOTA_EXCEEDED
            if meter.tokens < 1.0:
                return THROTTLED
            meter.tokens -= 1.0
            meter.used += 1
            return None


def _period_of(moment: datetime, period: str) -> str:
    if period == "WEEK":
        year, week, _ = moment.isocalendar()
        return f"{year}-W{week}"
    if period == "MONTH":
        return moment.strftime("%Y-%m")
    return moment.strftime("%Y-%m-%d")


class EmulatorPlans:
    """API key value → its usage plan, read from the emulator's API Gateway (the
    plans and keys that provisioning created), reloaded every ``ttl_seconds``."""

    def __init__(
        self,
        apigateway: Any,
        ttl_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = apigateway
        self._ttl = ttl_seconds
        self._clock = clock
        self._plans: dict[str, Plan] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def plan_for(self, api_key: str) -> Plan | None:
        with self._lock:
            if self._clock() - self._loaded_at >= self._ttl:
                self._plans = self._load()
                self._loaded_at = self._clock()
            return self._plans.get(api_key)

    def _load(self) -> dict[str, Plan]:
        plans: dict[str, Plan] = {}
        for page in self._api.get_paginator("get_usage_plans").paginate():
            for item in page.get("items", []):
                throttle = item.get("throttle") or {}
                quota = item.get("quota") or {}
                plan = Plan(
                    rate=float(throttle.get("rateLimit", float("inf"))),
                    burst=int(throttle.get("burstLimit", 1_000_000)),
                    quota=int(quota["limit"]) if "limit" in quota else None,
                    period=str(quota.get("period", "DAY")),
                )
                keys = self._api.get_usage_plan_keys(usagePlanId=item["id"]).get("items", [])
                for key in keys:
                    if key.get("value"):
                        plans[key["value"]] = plan
        return plans


class UsagePlanGate:
    """ASGI middleware: meters every call that carries an ``x-api-key`` of a plan."""

    def __init__(
        self, app: ASGIApp, plans: Callable[[str], Plan | None], meter: UsageMeter | None = None
    ) -> None:
        self._app = app
        self._plans = plans
        self._meter = meter or UsageMeter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            key = _header(scope, b"x-api-key")
            plan = self._plans(key) if key else None
            refusal = self._meter.admit(key, plan) if key and plan else None
            if refusal is not None:
                await _reply(send, 429, {"message": refusal})
                return
        await self._app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _reply(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def create_local_app() -> ASGIApp:
    """The router app behind the usage-plan gate, wired from the environment
    (``uvicorn --factory switchyard_local.gateway:create_local_app``)."""
    from switchyard import aws
    from switchyard.settings import get_settings
    from switchyard_router.app import create_app

    settings = get_settings()
    plans = EmulatorPlans(
        aws.client("apigateway", settings.region, settings.aws_endpoint_url),
        ttl_seconds=settings.api_key_cache_seconds,
    )
    return UsagePlanGate(create_app(), plans.plan_for)
