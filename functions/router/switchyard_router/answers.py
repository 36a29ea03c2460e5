"""What the router's routes share in answering: the 202 of a request that is queued
(async, or past its deadline), the base path its location is under, and the
metrics of a request answered or handed off at its deadline. What status an
outcome has is the outcome's (``switchyard_router.outcome``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Header, Request
from fastapi.responses import JSONResponse as StarletteJSONResponse

from switchyard.jsontext import json_bytes
from switchyard.telemetry import COUNT, MILLISECONDS, emit_metrics, request_dimension_sets
from switchyard_router.logic import MAX_DEADLINE_MS
from switchyard_router.outcome import Admitted, Outcome

# How long a caller waits for its answer (every route that waits, the OpenAI API's too).
DeadlineHeader = Annotated[int | None, Header(alias="x-deadline-ms", ge=1, le=MAX_DEADLINE_MS)]


class JSONResponse(StarletteJSONResponse):
    """Every JSON answer of the router (``switchyard.jsontext``), written by
    pydantic-core: an embedding's floats take a tenth of the json module's time
    (``docs/benchmarks.md``). A float that is not a number, which JSON cannot hold,
    is written as null."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content, nan_as_null=True)


def base_path(request: Request) -> str:
    """The public path prefix: behind API Gateway, its stage (``/dev``)."""
    event = request.scope.get("aws.event") or {}
    stage = (event.get("requestContext") or {}).get("stage")
    return f"/{stage}" if stage and stage != "$default" else ""


def cache_allowed(headers: Mapping[str, str]) -> bool:
    """Whether the caller lets the result cache answer (``Cache-Control: no-cache``
    asks the model again)."""
    return "no-cache" not in headers.get("cache-control", "").lower()


def routed_headers(admitted: Admitted) -> dict[str, str]:
    headers = {"x-model-version": admitted.version, "x-request-id": admitted.request_id}
    if admitted.cached is not None:
        headers["x-cache"] = "hit"  # answered from the result cache, not by a worker
    if admitted.replayed:
        headers["Idempotent-Replayed"] = "true"  # an earlier request's answer, again
    return headers


def queued(outcome: Outcome, base: str) -> JSONResponse:
    """202 (on every route): the request is queued, and where its result will be."""
    admitted = outcome.admitted
    location = f"{base}{admitted.location}"
    body = {
        "request_id": admitted.request_id,
        "model": admitted.model,
        "version": admitted.version,
        "status": "done" if admitted.cached is not None else "queued",
        "location": location,
    }
    return JSONResponse(
        body, outcome.status, headers={**routed_headers(admitted), "Location": location}
    )


def emit_answered(outcome: Outcome) -> None:
    """The metrics of a request that was waited for (predict, generate, chat,
    embeddings), once it is answered: its outcome's record is its result where
    there is one by now (none: handed off at its deadline, or a stream that has
    begun). Requests, Latency (until the answer, or its first token when streamed),
    Errors (a failure of the platform's, not a refused input) and Fallbacks of the
    version it was routed to: a failure answered by the fallback still counts
    against that version, which is what canary alarms and rollback watch. One
    document, filed per version, per model and per role (``request_dimension_sets``).
    A replay (Idempotency-Key) is no request of the version's: not counted again."""
    admitted = outcome.admitted
    if admitted.replayed:
        return
    error = admitted.fell_back == "failure" or outcome.status >= 500
    values = {
        "Requests": (COUNT, 1.0),
        "Latency": (MILLISECONDS, (time.time() - admitted.timings["received_at"]) * 1000),
        "Errors": (COUNT, 1.0 if error else 0.0),
        "Fallbacks": (COUNT, 1.0 if admitted.fell_back else 0.0),
    }
    first, *more = request_dimension_sets(admitted.model, admitted.version, admitted.role)
    emit_metrics(values, *more, **first)
