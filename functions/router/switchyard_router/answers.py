"""What the router's routes share: a JSON body read, the answer to a request that
is queued (async, or past its deadline), the status of one that failed, and the
metrics of a request answered or handed off at its deadline."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Header
from fastapi.responses import JSONResponse as StarletteJSONResponse

from switchyard.fields import FieldError
from switchyard.jsontext import json_bytes, parse_json
from switchyard.schemas import ResultRecord
from switchyard.telemetry import COUNT, MILLISECONDS, emit_metrics, request_dimension_sets
from switchyard_router.logic import MAX_DEADLINE_MS, Admitted, RequestRejected

# How long a caller waits for its answer (every route that waits, the OpenAI API's too).
DeadlineHeader = Annotated[int | None, Header(alias="x-deadline-ms", ge=1, le=MAX_DEADLINE_MS)]


class JSONResponse(StarletteJSONResponse):
    """Every JSON answer of the router (``switchyard.jsontext``): an embedding's 384
    floats take ~25 µs to write where the json module takes ~220 µs, a fifth of the
    router's own CPU per request. A float that is not a number, which JSON cannot
    hold, is written as null."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content, nan_as_null=True)


def json_body(body: bytes) -> Any:
    """The body's JSON; a body that is not JSON is refused (400, ``malformed_json``)."""
    try:
        return parse_json(body)
    except ValueError as exc:
        raise RequestRejected(
            400,
            "malformed_json",
            f"the body is not valid JSON: {exc}",
            [FieldError("body", str(exc))],
        ) from None


def json_object(body: bytes) -> dict[str, Any]:
    """The body's JSON object; anything else is refused (422, ``invalid_input``)."""
    document = json_body(body)
    if not isinstance(document, dict):
        raise RequestRejected(
            422,
            "invalid_input",
            "the body must be a JSON object",
            [FieldError("body", "not an object")],
        )
    return document


def failure_of(record: ResultRecord) -> tuple[int, str]:
    """A request that ended without its outputs: the status that answers it (its
    inputs refused 422, expired 504, cancelled 409, anything else 500) and its code."""
    code = record.error.code if record.error else record.status
    return {"invalid_input": 422, "expired": 504, "cancelled": 409}.get(code, 500), code


def cache_allowed(headers: Mapping[str, str]) -> bool:
    """Whether the caller lets the result cache answer (``Cache-Control: no-cache``
    asks the model again)."""
    return "no-cache" not in headers.get("cache-control", "").lower()


def routed_headers(admitted: Admitted) -> dict[str, str]:
    headers = {"x-model-version": admitted.version, "x-request-id": admitted.request_id}
    if admitted.cached is not None:
        headers["x-cache"] = "hit"  # answered from the result cache, not by a worker
    return headers


def queued(admitted: Admitted, base_path: str) -> JSONResponse:
    """202: the request is queued, and where its result will be."""
    location = f"{base_path}/v1/requests/{admitted.request_id}"
    body = {
        "request_id": admitted.request_id,
        "model": admitted.model,
        "version": admitted.version,
        "status": "done" if admitted.cached is not None else "queued",
        "location": location,
    }
    return JSONResponse(body, 202, headers={**routed_headers(admitted), "Location": location})


def emit_answered(admitted: Admitted, record: ResultRecord | None) -> None:
    """The metrics of a request that was waited for (predict, generate, chat,
    embeddings), once it is answered: ``record`` is its result where there is one
    by now (None: handed off at its deadline, or a stream that has begun).
    Requests, Latency (until the answer, or its first token when streamed), Errors
    (a failure of the platform's, not a refused input) and Fallbacks of the version
    it was routed to: a failure answered by the fallback still counts against that
    version, which is what canary alarms and rollback watch. One document, filed per
    version, per model and per role (``request_dimension_sets``)."""
    error = admitted.fell_back == "failure"
    if record is not None and record.status != "done":
        error = error or failure_of(record)[0] >= 500
    values = {
        "Requests": (COUNT, 1.0),
        "Latency": (MILLISECONDS, (time.time() - admitted.timings["received_at"]) * 1000),
        "Errors": (COUNT, 1.0 if error else 0.0),
        "Fallbacks": (COUNT, 1.0 if admitted.fell_back else 0.0),
    }
    first, *more = request_dimension_sets(admitted.model, admitted.version, admitted.role)
    emit_metrics(values, *more, **first)
