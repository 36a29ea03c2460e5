"""The Open Inference Protocol v2 (REST) under ``/v2``: KServe's and Triton's
protocol, so that ``tritonclient.http``, KServe's SDK and the tools that speak it
work unchanged against the platform (with the tenant's key in ``x-api-key``).

- ``GET /v2/health/live`` and ``/v2/health/ready``: the router is up.
- ``GET /v2``: the server's metadata.
- ``GET /v2/models/{m}[/versions/{v}]``: a model's metadata: its active versions,
  ``platform`` (the engine that runs it) and its input and output tensors, from the
  signature of its newest active version (or of the version named).
- ``GET .../ready``: 200 while the model (or version) has an active version; a
  model whose workers are at zero is ready, as its requests wait in its queue.
- ``POST .../infer``: tensors in (``switchyard_router.tensors``), submitted as a
  predict is (``PredictService.submit``: queues, canaries, the result cache,
  fallbacks, the deadline of ``x-deadline-ms`` or the request's
  ``parameters.timeout`` in microseconds); ``/versions/{v}`` pins the version.
  Outputs go as JSON, or as raw bytes after the JSON header where the request asks
  (``parameters.binary_data_output``, or an output's ``parameters.binary_data``).
  ``Idempotency-Key`` makes a retry the first request again, as on predict; its
  fingerprint covers the JSON header and the raw tensors' bytes.

Every refusal has the protocol's body, ``{"error": "<field>: <why>"}``, with the
platform's status, an input the model refuses being 400 rather than 422; a request
past its deadline is 202 with its ``Location`` (``/v1/requests/{id}``), as on
predict. The route class (:class:`ProtocolRoute`) shapes every error its routes
raise, so the app's handlers, which answer in the platform's shape, see none.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from starlette.concurrency import run_in_threadpool

from switchyard.admission import AtCapacity
from switchyard.bodies import field_errors
from switchyard.budgets import OverBudget
from switchyard.fields import FieldError, field_path
from switchyard.idempotency import KeyReused
from switchyard.jsontext import json_bytes
from switchyard.registry import ModelVersion
from switchyard_router import api_document
from switchyard_router.answers import (
    DeadlineHeader,
    JSONResponse,
    base_path,
    cache_allowed,
    emit_answered,
    routed_headers,
)
from switchyard_router.bodies import json_body, read_body
from switchyard_router.deps import RouterDeps
from switchyard_router.idempotent import IdempotencyHeader, idempotent
from switchyard_router.logic import MAX_DEADLINE_MS, Idempotent, PredictService, RequestRejected
from switchyard_router.outcome import Outcome
from switchyard_router.tensors import (
    Datatype,
    Output,
    Tensor,
    TensorFault,
    decode_binary,
    decode_json,
    input_spec,
    output_specs,
    output_tensors,
    platform_field,
    platform_inputs,
)

PREFIX = "/v2"
HEADER_LENGTH = "inference-header-content-length"
SERVER_NAME = "switchyard"

# The engine each runtime runs on, named as Triton names its backends where it has
# one; a version's record may name its engine itself (a generation model's decoder).
PLATFORMS = {
    "torchscript-classifier": "pytorch_libtorch",
    "onnx-classifier": "onnxruntime_onnx",
    "sentence-transformers": "sentence_transformers",
    "causal-lm": "transformers",
}

log = logging.getLogger("switchyard.router")

ModelName = Annotated[str, Path(max_length=64)]
VersionName = Annotated[str, Path(max_length=64)]


def is_protocol_path(path: str) -> bool:
    return path == PREFIX or path.startswith(f"{PREFIX}/")


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The protocol's error: ``{"error": message}``; the platform's 422 (an input the
    model refuses) is the protocol's 400."""
    return JSONResponse(
        {"error": message}, status_code=400 if status == 422 else status, headers=headers
    )


def said(message: str, errors: list[FieldError]) -> str:
    """A refusal's message, then the first field at fault and why (and how many
    more are)."""
    if not errors:
        return message
    first = f"{errors[0].field}: {errors[0].message}"
    if len(errors) > 1:
        first += f" (and {len(errors) - 1} more)"
    return f"{message}: {first}" if message else first


class ProtocolRoute(api_document.DocumentedLater):
    """A ``/v2`` route: whatever it raises is answered in the protocol's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answered(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestRejected as exc:
                if exc.code == KeyReused.code:  # the key's fault, not the input's: 422
                    return JSONResponse({"error": exc.message}, status_code=exc.status)
                errors = exc.errors if exc.status in (400, 422) else []
                return error_response(exc.status, said(exc.message, errors))
            except TensorFault as exc:
                return error_response(400, said("", [exc.error]))
            except (AtCapacity, OverBudget) as exc:
                return error_response(429, str(exc), {"Retry-After": str(exc.retry_after_seconds)})
            except RequestValidationError as exc:
                errors = [FieldError(field_path(e["loc"]), e["msg"]) for e in exc.errors()]
                return error_response(400, said("the request is not valid", errors))
            except Exception:
                log.exception("unhandled error")
                return error_response(500, "the platform failed to handle the request")

        return answered


# -- bodies --------------------------------------------------------------------------


class TensorParameters(BaseModel):
    """An input's parameters: ``binary_data_size``, its bytes after the JSON header."""

    model_config = ConfigDict(extra="allow")

    binary_data_size: StrictInt | None = Field(default=None, ge=0)


class InputTensor(BaseModel):
    """An input tensor: its elements in ``data`` (flat or nested, row-major), or
    ``parameters.binary_data_size`` bytes after the JSON header."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    shape: list[Annotated[StrictInt, Field(ge=0)]] = Field(max_length=8)
    datatype: Datatype
    parameters: TensorParameters | None = None
    data: list[Any] | None = None


class OutputParameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    binary_data: bool | None = None
    classification: StrictInt | None = None


class RequestedOutput(BaseModel):
    """An output the caller wants, and whether as raw bytes (``binary_data``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    parameters: OutputParameters | None = None


class RequestParameters(BaseModel):
    """The request's parameters: ``binary_data_output`` (every output not named in
    ``outputs`` as raw bytes), ``timeout`` (microseconds: the deadline), and a
    generation's settings (``max_tokens``, ``temperature``, ``top_p``, ``seed``,
    ``stop``). Others are taken and ignored, as the protocol lets a server do."""

    model_config = ConfigDict(extra="allow")

    binary_data_output: bool | None = None
    timeout: StrictInt | None = Field(default=None, ge=1)


class InferBody(BaseModel):
    """An inference request (its JSON header, where tensors follow as raw bytes)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=256)
    parameters: RequestParameters | None = None
    inputs: list[InputTensor] = Field(min_length=1, max_length=16)
    outputs: list[RequestedOutput] | None = Field(default=None, max_length=16)


@dataclass
class InferRequest:
    """An inference request as read from the wire: its header and each input's raw
    bytes (None where its elements are in the JSON)."""

    body: InferBody
    raw: list[bytes | None] = field(default_factory=list)


def read_infer(body: bytes, header_length: str | None) -> InferRequest:
    """The request in ``body``: all JSON, or (``Inference-Header-Content-Length``)
    its JSON header and then each binary input's bytes, in the inputs' order."""
    size = len(body)
    if header_length is not None:
        if not header_length.isascii() or not header_length.isdigit() or int(header_length) > size:
            raise RequestRejected(
                400,
                "invalid_header",
                f"Inference-Header-Content-Length must be a number of bytes up to {size}",
                [FieldError("Inference-Header-Content-Length", f"is {header_length!r}")],
            )
        size = int(header_length)
    try:
        parsed = InferBody.model_validate(json_body(body[:size]))
    except ValidationError as exc:
        raise RequestRejected(
            400, "invalid_request", "the request is not valid", field_errors(exc)
        ) from None
    rest = memoryview(body)[size:]
    raw: list[bytes | None] = []
    at = 0
    for i, tensor in enumerate(parsed.inputs):
        length = tensor.parameters.binary_data_size if tensor.parameters else None
        if length is None:
            if tensor.data is None:
                _refuse(f"inputs[{i}].data", "is missing (or give parameters.binary_data_size)")
            raw.append(None)
            continue
        if tensor.data is not None:
            _refuse(f"inputs[{i}].data", "must be absent where binary_data_size is given")
        if at + length > len(rest):
            _refuse(
                f"inputs[{i}].parameters.binary_data_size",
                f"is {length}; only {len(rest) - at} bytes follow the JSON header",
            )
        raw.append(bytes(rest[at : at + length]))
        at += length
    if at != len(rest):
        _refuse("body", f"{len(rest) - at} bytes after the inputs' binary data belong to no input")
    return InferRequest(parsed, raw)


def _refuse(where: str, why: str) -> None:
    raise RequestRejected(
        400, "invalid_request", "the request is not valid", [FieldError(where, why)]
    )


# -- models --------------------------------------------------------------------------


EngineOf = Callable[[str, str], str | None]
"""(model, version) -> the engine its workers said they run it on (None: unsaid)."""


def platform_of(version: ModelVersion, engine_of: EngineOf | None = None) -> str:
    """The engine that runs ``version``: what its workers said (``switchyard.engines``:
    a generation model's decoder, vLLM or transformers, is the host's), else its
    runtime's (``PLATFORMS``)."""
    if engine_of is not None:
        try:
            said = engine_of(version.model, version.version)
        except Exception:  # noqa: BLE001 - the metadata stands without the workers' word
            said = None
        if said:
            return said
    return PLATFORMS.get(version.runtime, version.runtime)


def model_metadata(
    model: str,
    versions: list[ModelVersion],
    shown: ModelVersion,
    engine_of: EngineOf | None = None,
) -> dict[str, Any]:
    """The protocol's model metadata: ``versions`` (active), and ``shown``'s platform
    and tensors."""
    return {
        "name": model,
        "versions": [v.version for v in sorted(versions, key=lambda v: v.created_at)],
        "platform": platform_of(shown, engine_of),
        "inputs": [input_spec(shown.signature).metadata()],
        "outputs": [spec.metadata() for spec in output_specs(shown.signature, shown.labels)],
    }


def newest(service: PredictService, model: str) -> tuple[list[ModelVersion], ModelVersion]:
    """``model``'s active versions and the newest of them; 404 for an unknown model
    or one with no active version."""
    if model not in service.models:
        raise RequestRejected(404, "unknown_model", f"model {model!r} does not exist")
    versions = service.active_versions(model)
    if not versions:
        raise RequestRejected(404, "no_version", f"model {model!r} has no active version")
    return versions, max(versions, key=lambda v: v.created_at)


def version_of(service: PredictService, model: str, version: str | None) -> ModelVersion:
    """The version named (404 unless active), else the newest active one."""
    if version is None:
        return newest(service, model)[1]
    newest(service, model)
    return service.pinned_version(model, version)


# -- inference -----------------------------------------------------------------------


@dataclass(frozen=True)
class InferCall:
    model: str
    tenant: str
    request: InferRequest
    pinned: str | None  # /versions/{v}, else the x-model-version header
    headers: dict[str, str]
    deadline_ms: int | None
    base_path: str
    idempotency_key: str | None = None

    def idempotent(self) -> Idempotent | None:
        """The call's Idempotency-Key and what it asks: the JSON header and a hash of
        each input's raw bytes, sent to this model (and version). None without a key:
        nothing is hashed then."""
        if self.idempotency_key is None:
            return None
        raw = [hashlib.sha256(r).hexdigest() if r is not None else None for r in self.request.raw]
        asked = {"header": self.request.body.model_dump(mode="json"), "raw": raw}
        return idempotent(self.idempotency_key, f"infer {self.model} {self.pinned or ''}", asked)


def wanted_outputs(body: InferBody, version: ModelVersion) -> dict[str, bool]:
    """Each output to answer (in order) and whether as raw bytes."""
    specs = output_specs(version.signature, version.labels)
    default = bool(body.parameters and body.parameters.binary_data_output)
    if not body.outputs:
        return {spec.name: default for spec in specs}
    names = {spec.name for spec in specs}
    wanted: dict[str, bool] = {}
    for i, output in enumerate(body.outputs):
        if output.name not in names:
            known = ", ".join(sorted(names))
            _refuse(
                f"outputs[{i}].name",
                f"{output.name!r} is not an output of {version.model} ({known})",
            )
        parameters = output.parameters
        if parameters is not None and parameters.classification:
            _refuse(f"outputs[{i}].parameters.classification", "is not supported")
        chosen = parameters.binary_data if parameters is not None else None
        wanted[output.name] = default if chosen is None else chosen
    return wanted


def input_tensor(request: InferRequest, version: ModelVersion) -> Tensor:
    """The model's one input, decoded."""
    spec = input_spec(version.signature)
    inputs = request.body.inputs
    if len(inputs) != 1 or inputs[0].name != spec.name:
        given = ", ".join(repr(t.name) for t in inputs)
        _refuse("inputs", f"{version.model} takes one input, {spec.name!r}; got {given}")
    tensor = inputs[0]
    shape = tuple(tensor.shape)
    raw = request.raw[0] if request.raw else None
    if raw is not None:
        return decode_binary(tensor.name, tensor.datatype, shape, raw, "inputs[0]")
    return decode_json(tensor.name, tensor.datatype, shape, tensor.data, "inputs[0]")


def deadline_of(call: InferCall) -> int | None:
    """The header's deadline, else the request's ``timeout`` (microseconds)."""
    parameters = call.request.body.parameters
    if call.deadline_ms is not None or parameters is None or parameters.timeout is None:
        return call.deadline_ms
    return min(max(math.ceil(parameters.timeout / 1000), 1), MAX_DEADLINE_MS)


def infer(service: PredictService, call: InferCall) -> Response:
    version = version_of(service, call.model, call.pinned)
    body = call.request.body
    tensor = input_tensor(call.request, version)
    parameters = body.parameters.model_dump(exclude_none=True) if body.parameters else None
    inputs = platform_inputs(tensor, version.signature, parameters)
    wanted = wanted_outputs(body, version)
    with service.hold(call.tenant, "sync_requests"):
        try:
            admitted = service.submit(
                model=call.model,
                tenant=call.tenant,
                inputs=inputs,
                sticky_headers=call.headers,
                deadline_ms=deadline_of(call),
                pinned=call.pinned,
                cache_lookup=cache_allowed(call.headers),
                idempotent=call.idempotent(),
            )
        except RequestRejected as exc:
            exc.rename_fields(lambda f: platform_field(f, tensor.name, version.signature))
            raise
        outcome = service.answer(admitted)
    emit_answered(outcome)
    return answer(outcome, body, wanted, version, call.base_path)


def answer(
    outcome: Outcome, body: InferBody, wanted: dict[str, bool], version: ModelVersion, base: str
) -> Response:
    """The outcome in the protocol's shapes: the outputs (200), or an error body with
    the outcome's status (202 with the Location where it is still queued)."""
    admitted = outcome.admitted
    headers = routed_headers(admitted)
    if outcome.record is None:
        location = f"{base}{admitted.location}"
        message = f"the request is queued past its deadline; its result will be at {location}"
        return error_response(outcome.status, message, {**headers, "Location": location})
    record = outcome.record
    headers["x-model-version"] = record.version
    if outcome.kind != "done":
        return error_response(outcome.status, outcome.message, headers)
    outputs = output_tensors(
        output_specs(version.signature, version.labels), record.outputs or [], wanted
    )
    return inference_response(
        {"model_name": record.model, "model_version": record.version,
         "id": body.id if body.id is not None else record.request_id},
        outputs,
        headers,
    )  # fmt: skip


def inference_response(
    header: dict[str, Any], outputs: list[Output], headers: dict[str, str]
) -> Response:
    """JSON, or the JSON header and then the raw outputs, in order, with its length
    in ``Inference-Header-Content-Length``."""
    document = {**header, "outputs": [o.metadata for o in outputs]}
    raw = [o.raw for o in outputs if o.raw is not None]
    if not raw:
        return JSONResponse(document, headers=headers)
    encoded = json_bytes(document, nan_as_null=True)
    return Response(
        b"".join([encoded, *raw]),
        media_type="application/octet-stream",
        headers={**headers, "Inference-Header-Content-Length": str(len(encoded))},
    )


# -- routes --------------------------------------------------------------------------


def add_protocol_routes(
    app: FastAPI, deps: RouterDeps, tenant_of: Callable[[Request], str]
) -> None:
    """Register the ``/v2`` routes on the router app."""
    service = deps.service
    engine_of = deps.engines.engine_of if deps.engines is not None else None
    router = APIRouter(route_class=ProtocolRoute, tags=["inference protocol v2"])

    @router.get(f"{PREFIX}/health/live", responses=api_document.OIP_LIVE)
    def live() -> Any:
        return {"live": True}

    @router.get(f"{PREFIX}/health/ready", responses=api_document.OIP_READY)
    def ready() -> Any:
        return {"ready": True}

    @router.get(PREFIX, responses=api_document.OIP_SERVER)
    def server(request: Request) -> Any:
        tenant_of(request)
        return {"name": SERVER_NAME, "version": app.version, "extensions": []}

    @router.get(f"{PREFIX}/models/{{model}}", responses=api_document.OIP_MODEL)
    def metadata(request: Request, model: ModelName) -> Any:
        tenant_of(request)
        versions, shown = newest(service, model)
        return model_metadata(model, versions, shown, engine_of)

    @router.get(f"{PREFIX}/models/{{model}}/versions/{{version}}", responses=api_document.OIP_MODEL)
    def version_metadata(request: Request, model: ModelName, version: VersionName) -> Any:
        tenant_of(request)
        shown = version_of(service, model, version)
        return model_metadata(model, newest(service, model)[0], shown, engine_of)

    @router.get(f"{PREFIX}/models/{{model}}/ready", responses=api_document.OIP_MODEL_READY)
    def model_ready(request: Request, model: ModelName) -> Any:
        tenant_of(request)
        newest(service, model)
        return {"name": model, "ready": True}

    @router.get(
        f"{PREFIX}/models/{{model}}/versions/{{version}}/ready",
        responses=api_document.OIP_MODEL_READY,
    )
    def version_ready(request: Request, model: ModelName, version: VersionName) -> Any:
        tenant_of(request)
        version_of(service, model, version)
        return {"name": model, "version": version, "ready": True}

    async def _infer(
        request: Request, model: str, version: str | None, deadline: int | None, key: str | None
    ) -> Response:
        tenant = tenant_of(request)
        body = await read_body(request, deps.max_body_bytes)
        parsed = read_infer(body, request.headers.get(HEADER_LENGTH))
        call = InferCall(
            model=model,
            tenant=tenant,
            request=parsed,
            pinned=version or request.headers.get("x-model-version"),
            headers=dict(request.headers),
            deadline_ms=deadline,
            base_path=base_path(request),
            idempotency_key=key,
        )
        return await run_in_threadpool(infer, service, call)

    @router.post(
        f"{PREFIX}/models/{{model}}/infer",
        responses=api_document.OIP_INFER,
        openapi_extra=api_document.request_body(InferBody),
    )
    async def model_infer(
        request: Request,
        model: ModelName,
        deadline_ms: DeadlineHeader = None,
        idempotency_key: IdempotencyHeader = None,
    ) -> Response:
        return await _infer(request, model, None, deadline_ms, idempotency_key)

    @router.post(
        f"{PREFIX}/models/{{model}}/versions/{{version}}/infer",
        responses=api_document.OIP_INFER,
        openapi_extra=api_document.request_body(InferBody),
    )
    async def version_infer(
        request: Request,
        model: ModelName,
        version: VersionName,
        deadline_ms: DeadlineHeader = None,
        idempotency_key: IdempotencyHeader = None,
    ) -> Response:
        return await _infer(request, model, version, deadline_ms, idempotency_key)

    # Added as they are: include_router would make them again from their documented
    # answers, which DocumentedLater has stripped of their bodies' models.
    app.router.routes.extend(router.routes)
