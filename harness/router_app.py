"""The router's app over the in-memory stores, for the router's unit tests: one
builder of its ``PredictService`` and one of the client that calls it behind the
API Gateway stand-in, so each test names only what it sets apart (its queues, its
versions, the store or rule under test)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from harness.fakes import (
    FakePayloads,
    FakeRegistry,
    FakeResults,
    behind_api_gateway,
    tenant_keys,
)
from switchyard.queues import ModelLanes
from switchyard.registry import ModelVersion
from switchyard_router.app import RouterDeps, create_app
from switchyard_router.logic import PredictService

RESULT_TTL_SECONDS = 3600
CLAIM_CHECK_BYTES = 200_000
MAX_BODY_BYTES = 60_000


def predict_service(
    endpoints: dict[str, ModelLanes],
    *versions: ModelVersion,
    results: FakeResults | None = None,
    payloads: FakePayloads | None = None,
    routing: Any = None,
    **options: Any,
) -> PredictService:
    """A ``PredictService`` serving ``endpoints`` (model -> its lanes) with
    ``versions`` registered; ``options`` are its own keywords (cache, admission,
    idempotency, queued_work, sleep, ...)."""
    return PredictService(
        endpoints=endpoints,
        registry=FakeRegistry(*versions),
        results=FakeResults() if results is None else results,
        payloads=FakePayloads() if payloads is None else payloads,
        routing=routing,
        result_ttl_seconds=RESULT_TTL_SECONDS,
        claim_check_bytes=CLAIM_CHECK_BYTES,
        **options,
    )


def router_client(
    service: PredictService,
    keys: dict[str, str],
    max_body_bytes: int = MAX_BODY_BYTES,
    **client: Any,
) -> TestClient:
    """The router's app on ``service``, behind the API Gateway stand-in holding
    ``keys`` (key value -> tenant); ``client``: TestClient's own keywords."""
    app = create_app(
        RouterDeps(service=service, tenants=tenant_keys(keys), max_body_bytes=max_body_bytes)
    )
    return TestClient(behind_api_gateway(app, keys), **client)
