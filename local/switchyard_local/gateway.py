"""What API Gateway does in front of the router, for the local platform.

Like API Gateway on the platform's REST API, for every ``/v1/``, ``/openai/`` and ``/v2``
call it:

- refuses a call without an API key (401: the key authorizer finds none in
  ``x-api-key`` or ``Authorization: Bearer``) or with a key that is not enabled
  (403), with the gateway's own answers;
- meters the stage as a whole (the stage's throttle, every key together) and the
  key against its usage plan (rate and burst as token buckets, and a quota per
  period) and refuses a call over a limit (429) before the router runs;
- passes the verified key's *id* in the request context
  (``requestContext.identity.apiKeyId``, in the ``aws.event`` scope entry where
  Mangum puts the Lambda event), which is all the router learns of the key.

moto keeps the keys and usage plans that provisioning created but enforces none of
it, so this layer reads them from the emulator. The router app inside is the one
that ships (``switchyard_router``, from its built layout), wired from its settings
as in Lambda. The answers' bodies are the platform's gateway responses
(``switchyard.schemas``), as in the cloud.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from switchyard.schemas import FORBIDDEN, QUOTA_EXCEEDED, THROTTLED, UNAUTHORIZED, GatewayAnswer

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The API's resources; anything else (health, docs) is the local server's own.
API_PREFIXES = ("/v1/", "/openai/", "/v2")
KEYS_CACHE_SECONDS = 30.0
# The stand-in plays API Gateway inside the router's process, which runs with the
# router's own key: it reads keys and usage plans with the operator's, which the
# supervisor puts here.
SERVICE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "LOCAL_SERVICE_AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY": "LOCAL_SERVICE_AWS_SECRET_ACCESS_KEY",
}
# The stage's throttle ("<rate>:<burst>", the manifest's [stages.*.concurrency]
# throttle_rate and throttle_burst), which the supervisor puts here: API Gateway
# applies it to every call of the stage, before each key's usage plan.
STAGE_THROTTLE = "LOCAL_STAGE_THROTTLE"
# The stage's bucket in the meter (no key value looks like it).
_STAGE = " stage"


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

    def admit(self, key: str, plan: Plan) -> GatewayAnswer | None:
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


@dataclass(frozen=True)
class ApiKey:
    """An enabled API key as API Gateway knows it: its id and its usage plan."""

    id: str
    plan: Plan | None


class EmulatorKeys:
    """API key value -> its id and usage plan, read from the emulator's API Gateway
    (the keys and plans provisioning created), reloaded every ``ttl_seconds``; an
    unknown key reloads at most once a second, so a new key works at once and a
    flood of bad keys cannot flood the emulator."""

    def __init__(
        self,
        apigateway: Any,
        ttl_seconds: float = KEYS_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = apigateway
        self._ttl = ttl_seconds
        self._clock = clock
        self._keys: dict[str, ApiKey] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def key_for(self, value: str) -> ApiKey | None:
        with self._lock:
            age = self._clock() - self._loaded_at
            if age >= self._ttl or (value not in self._keys and age >= 1.0):
                self._keys = self._load()
                self._loaded_at = self._clock()
            return self._keys.get(value)

    def _load(self) -> dict[str, ApiKey]:
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
                for key in self._api.get_usage_plan_keys(usagePlanId=item["id"]).get("items", []):
                    plans[key["id"]] = plan
        keys: dict[str, ApiKey] = {}
        for page in self._api.get_paginator("get_api_keys").paginate(includeValues=True):
            for item in page.get("items", []):
                if item.get("enabled") and item.get("value"):
                    keys[item["value"]] = ApiKey(item["id"], plans.get(item["id"]))
        return keys


class ApiGatewayStandIn:
    """ASGI middleware: API key check, usage-plan limits and the request context."""

    def __init__(
        self,
        app: ASGIApp,
        keys: Callable[[str], ApiKey | None],
        meter: UsageMeter | None = None,
        stage: Plan | None = None,
    ) -> None:
        self.app = app  # the router app it fronts
        self._keys = keys
        self._meter = meter or UsageMeter()
        self._stage = stage  # the stage's throttle, every key together

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIXES):
            value = _header(scope, b"x-api-key") or _bearer(scope)
            if value is None:
                await _reply(send, UNAUTHORIZED)
                return
            key = self._keys(value)
            if key is None:
                await _reply(send, FORBIDDEN)
                return
            refusal = self._meter.admit(_STAGE, self._stage) if self._stage else None
            if refusal is None and key.plan:
                refusal = self._meter.admit(value, key.plan)
            if refusal is not None:
                await _reply(send, refusal)
                return
            identity = {"apiKeyId": key.id, "apiKey": value, "sourceIp": _client_ip(scope)}
            scope = {**scope, "aws.event": {"requestContext": {"identity": identity}}}
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    """The key of ``Authorization: Bearer <key>`` (the OpenAI client's way of sending
    it; in AWS the API's key authorizer takes it the same way)."""
    value = _header(scope, b"authorization")
    if value and value[:7].lower() == "bearer ":
        return value[7:].strip() or None
    return None


def _client_ip(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


async def _reply(send: Send, answer: GatewayAnswer) -> None:
    data = json.dumps(answer.body()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": answer.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def create_local_app() -> ASGIApp:
    """The shipped router app behind the API Gateway stand-in, wired from the
    environment (``uvicorn --factory switchyard_local.gateway:create_local_app``)."""
    from switchyard import aws
    from switchyard.settings import RouterSettings, get_settings
    from switchyard_router.app import create_app
    from switchyard_router.wiring import build_deps

    # `kill -USR1` prints every thread's stack to the log, as a worker does: how to
    # see what a router whose requests do not end is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = get_settings(RouterSettings)
    apigateway = aws.client("apigateway", settings.region, settings.aws_endpoint_url)
    service_key = {k.lower(): os.environ.get(v) for k, v in SERVICE_CREDENTIALS.items()}
    if all(service_key.values()):
        import boto3

        apigateway = boto3.client(
            "apigateway",
            region_name=settings.region,
            endpoint_url=settings.aws_endpoint_url,
            **service_key,
        )
    return ApiGatewayStandIn(
        create_app(build_deps(settings)),
        EmulatorKeys(apigateway).key_for,
        stage=stage_throttle(os.environ.get(STAGE_THROTTLE)),
    )


def stage_throttle(text: str | None) -> Plan | None:
    """The stage's throttle from ``"<rate>:<burst>"`` (None: no stage throttle)."""
    if not text:
        return None
    rate, _, burst = text.partition(":")
    return Plan(rate=float(rate), burst=int(burst))
