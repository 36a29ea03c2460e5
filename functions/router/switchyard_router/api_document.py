"""The router's OpenAPI document: what each route takes and what it answers.

Each request body is rendered from its model (``switchyard.bodies``), and each
model's own request from its signature: a model's predict and generate are paths
of their own (``/v1/models/digits-cnn/predict``), and the OpenAI-compatible bodies
name the models that take them, so that a client generated from the document knows
what each model takes. They are read from the registry's active versions when the
document is first asked for.

Every status a route can give is listed with its body's schema, the gateway's own
answers (403, 429) included, so that a client generated from the document, and the
OpenAPI fuzz the e2e tier runs, meet no undocumented answer. The answers' bodies
are typed dicts: they describe what the routes build, and nothing validates them
on the way out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal, NotRequired

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from switchyard.bodies import (
    chat_body_for,
    completion_body_for,
    embeddings_body_for,
    embeds,
    generate_body_for,
    generates,
    predict_body_for,
    request_schema,
)
from switchyard.registry import ModelVersion, VersionStatus
from switchyard.schemas import (
    FORBIDDEN,
    PAYLOAD_TOO_LARGE,
    QUOTA_EXCEEDED,
    THROTTLED,
    UNAUTHORIZED,
    ErrorInfo,
    GatewayAnswer,
    RequestCost,
    Status,
)

API_KEY_SCHEME = "apiKey"


class FieldProblem(TypedDict):
    """One part of the request at fault, named by its path (``inputs[3][12]``)."""

    field: str
    message: str


class ErrorBody(TypedDict):
    """Every refusal: what went wrong, a stable code, and the fields at fault."""

    message: str
    code: str
    errors: NotRequired[list[FieldProblem]]


class RequestStatus(TypedDict):
    """A request as it stands: queued, or ended in one of the final statuses."""

    request_id: str
    model: str
    version: str
    status: Status
    outputs: NotRequired[list[Any]]
    error: NotRequired[ErrorInfo]
    timings: dict[str, float]  # milliseconds per stage, and the batch's size
    # The worker service that ran it: the model's own, its pool, or the CPU pool
    # that took it on overflow (absent until a worker has run it).
    served_by: NotRequired[str]
    # What it cost (USD, list prices): its share of the worker's time and the AWS
    # requests its path made (absent until a worker has answered it; docs/costs.md).
    cost: NotRequired[RequestCost]


class Prediction(RequestStatus):
    """A request answered within its deadline; ``fallback`` when the model's
    fallback version answered it."""

    fallback: bool


class FailedPrediction(Prediction):
    """A request that ended within its deadline without outputs (error, expired or
    cancelled), with a message saying why and its code (as every refusal has)."""

    message: str
    code: str


class AlreadyFinished(RequestStatus):
    """A cancel that came too late: the request had ended; its result stands."""

    message: str
    code: Literal["already_finished"]


class Accepted(TypedDict):
    """A request that is queued; poll ``location`` for its result. ``done`` when it
    was answered from the result cache: its result is at ``location`` already."""

    request_id: str
    model: str
    version: str
    status: Literal["queued", "done"]
    location: str


class VersionEntry(TypedDict):
    version: str
    status: VersionStatus
    runtime: str
    created_at: float
    max_batch_size: int
    max_wait_ms: int
    default_deadline_ms: int


class ModelEntry(TypedDict):
    model: str
    versions: list[VersionEntry]


class Catalog(TypedDict):
    """The models this router serves and their versions, from the registry."""

    models: list[ModelEntry]


class Health(TypedDict):
    """The router is up and serving."""

    status: Literal["ok"]


def _header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


def _gateway(description: str, *answers: GatewayAnswer) -> dict[str, Any]:
    examples = {answer.code: {"value": answer.body()} for answer in answers}
    return {
        "model": ErrorBody,
        "description": description,
        "content": {"application/json": {"examples": examples}},
    }


_ROUTED = {
    "x-model-version": _header("The version that answered"),
    "x-request-id": _header("The request's id"),
}

# What every route may answer: the gateway's refusals, a method the path does not
# take, and the platform's own failure.
COMMON: dict[int | str, dict[str, Any]] = {
    401: _gateway("No API key (x-api-key, or Authorization: Bearer)", UNAUTHORIZED),
    403: _gateway("An API key the gateway does not know", FORBIDDEN),
    405: {
        "model": ErrorBody,
        "description": "The path does not take this method; Allow lists those it takes",
        "headers": {"Allow": _header("The methods the path takes")},
    },
    429: _gateway("Over the key's usage plan: its rate or its quota", THROTTLED, QUOTA_EXCEEDED),
    500: {"model": ErrorBody, "description": "The platform failed to handle the request"},
}


def _over_a_cap(body: Any) -> dict[str, Any]:
    """The 429 of a route that queues work: the gateway's, or the router's at one of
    the tenant's caps (``switchyard.admission``), in ``body`` (the route's errors')."""
    return {
        "model": body | ErrorBody,
        "description": "Over the key's usage plan (the gateway's throttled, "
        "quota_exceeded), or over one of the tenant's caps, with Retry-After: its sync "
        "requests at once (too_many_requests), its streams (too_many_streams), or its "
        "requests queued on this model (queue_full)",
        "headers": {
            "Retry-After": {
                "description": "Seconds to wait before trying again (on a tenant's cap)",
                "schema": {"type": "integer"},
            }
        },
    }


HEALTH = {200: {"model": Health, "description": "The router is up"}, **COMMON}

MODELS = {200: {"model": Catalog, "description": "The models and their versions"}, **COMMON}

PREDICT: dict[int | str, dict[str, Any]] = {
    **COMMON,
    200: {
        "model": Prediction,
        "description": "The outputs, within the deadline",
        "headers": _ROUTED,
    },
    202: {
        "model": Accepted,
        "description": "Queued (async, or the deadline passed first); poll the Location",
        "headers": {"Location": _header("Where the result will be"), **_ROUTED},
    },
    400: {"model": ErrorBody, "description": "A body that is not JSON, or over the size limit"},
    404: {
        "model": ErrorBody,
        "description": "Unknown model, a model with no active version, or a pinned version "
        "that is not active",
    },
    409: {"model": FailedPrediction, "description": "The request was cancelled while it waited"},
    413: _gateway("A body over API Gateway's payload limit", PAYLOAD_TOO_LARGE),
    429: _over_a_cap(ErrorBody),
    422: {
        "model": ErrorBody | FailedPrediction,
        "description": "Inputs or headers that do not match the model's signature or the "
        "request's schema (the fields at fault are named)",
    },
    500: {
        "model": ErrorBody | FailedPrediction,
        "description": "The model failed on these inputs, or the platform failed",
    },
    504: {"model": FailedPrediction, "description": "The work expired before it could run"},
}


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Generation(TypedDict):
    """A generation's text, why it ended (``stop``: the end of text or a stop
    sequence; ``length``: max_tokens or the context) and its token counts."""

    request_id: str
    model: str
    version: str
    status: Literal["done"]
    text: str
    finish_reason: Literal["stop", "length"]
    usage: Usage


# Each server-sent event: its data is JSON, a token's text and then how the
# generation ended (or why it did not); OpenAI's is a chunk object per event, then
# the text [DONE].
_NATIVE_DATA = {
    "oneOf": [
        {"type": "object", "required": ["token"], "properties": {"token": {"type": "string"}}},
        {
            "type": "object",
            "required": ["done", "finish_reason", "usage"],
            "properties": {
                "done": {"const": True},
                "request_id": {"type": "string"},
                "finish_reason": {"enum": ["stop", "length", "timeout"]},
                "usage": {"type": "object"},
            },
        },
        {"type": "object", "required": ["error"], "properties": {"error": {"type": "object"}}},
    ]
}


def _event(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            }
        },
    }


_NATIVE_EVENT = _event(_NATIVE_DATA)
_OPENAI_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string", "description": "a chunk (JSON), or [DONE]"}},
}


class FailedGeneration(TypedDict):
    """A generation that ended within its deadline without its text: its status,
    code and why."""

    request_id: str
    status: Status
    code: str
    message: str


GENERATE: dict[int | str, dict[str, Any]] = {
    **PREDICT,
    409: {"model": FailedGeneration, "description": "The request was cancelled while it waited"},
    422: {
        "model": ErrorBody | FailedGeneration,
        "description": "A body that does not match the model's generation signature (the "
        "fields at fault are named), or inputs the model refused as it ran",
    },
    500: {
        "model": ErrorBody | FailedGeneration,
        "description": "The model failed on this request, or the platform failed",
    },
    504: {"model": FailedGeneration, "description": "The work expired before it could run"},
    200: {
        "model": Generation,
        "description": 'The text (with stream: server-sent events, a data: {"token"} '
        'per token and a last data: {"done": true, "finish_reason", "usage"})',
        "headers": _ROUTED,
        "content": {"text/event-stream": {"schema": _NATIVE_EVENT}},
    },
    400: {
        "model": ErrorBody,
        "description": "A body that is not JSON or over the size limit, a prompt and "
        "max_tokens over the model's context, or a model that does not generate",
    },
}


class OpenAIErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str


class OpenAIError(TypedDict):
    """OpenAI's error body, on every ``/openai/v1`` route."""

    error: OpenAIErrorDetail


_OPENAI_BAD = {"model": OpenAIError, "description": "A bad parameter (named in param)"}
# The OpenAI routes' own answers have OpenAI's body; the gateway's stay the platform's.
_OPENAI_COMMON: dict[int | str, dict[str, Any]] = {
    **COMMON,
    405: {**COMMON[405], "model": OpenAIError},
    500: {"model": OpenAIError, "description": "The model failed, or the platform did"},
}
_OPENAI_UNKNOWN = {"model": OpenAIError, "description": "No such model"}

OPENAI_MODELS: dict[int | str, dict[str, Any]] = {
    **_OPENAI_COMMON,
    200: {"description": "The models, as OpenAI's model objects"},
}
OPENAI_MODEL: dict[int | str, dict[str, Any]] = {**OPENAI_MODELS, 404: _OPENAI_UNKNOWN}
OPENAI_GENERATE: dict[int | str, dict[str, Any]] = {
    **_OPENAI_COMMON,
    200: {
        "description": "The completion (with stream: server-sent events of chunks, then "
        "data: [DONE])",
        "headers": _ROUTED,
        "content": {"text/event-stream": {"schema": _OPENAI_EVENT}},
    },
    202: {
        "model": Accepted,
        "description": "The deadline passed before the first token; poll the Location",
    },
    400: _OPENAI_BAD,
    404: _OPENAI_UNKNOWN,
    409: {"model": OpenAIError, "description": "The request was cancelled while it waited"},
    429: _over_a_cap(OpenAIError),
    504: {"model": OpenAIError, "description": "The work expired before it could run"},
}
OPENAI_EMBEDDINGS: dict[int | str, dict[str, Any]] = {
    **_OPENAI_COMMON,
    200: {"description": "The embeddings, as OpenAI's list of embedding objects"},
    400: _OPENAI_BAD,
    404: _OPENAI_UNKNOWN,
    202: {"model": Accepted, "description": "The deadline passed first; poll the Location"},
    409: {"model": OpenAIError, "description": "The request was cancelled while it waited"},
    429: _over_a_cap(OpenAIError),
    504: {"model": OpenAIError, "description": "The work expired before it could run"},
}

_UNKNOWN_REQUEST = {"model": ErrorBody, "description": "No such request for this API key"}
_BAD_ID = {"model": ErrorBody, "description": "A request id over 64 characters"}

REQUEST_STATUS = {
    200: {"model": RequestStatus, "description": "The request's status, and its result"},
    404: _UNKNOWN_REQUEST,
    422: _BAD_ID,
    **COMMON,
}

CANCEL = {
    200: {"model": RequestStatus, "description": "Cancelled: it will not run"},
    404: _UNKNOWN_REQUEST,
    409: {"model": AlreadyFinished, "description": "The request had already ended"},
    422: _BAD_ID,
    **COMMON,
}


class DocumentedLater(APIRoute):
    """A route whose answers' body schemas are worked out when the document is first
    asked for, not when the route is made. FastAPI builds a pydantic field for each
    ``model`` of a route's ``responses`` as it makes the route: 148 of them here,
    ~80 ms of every cold start, for a document that few instances are ever asked
    for. The route is made with its answers' descriptions and headers only."""

    def __init__(
        self, path: str, endpoint: Any, *, responses: dict[int | str, Any] | None = None, **kw: Any
    ) -> None:
        given = responses or {}
        self.response_models = {code: r["model"] for code, r in given.items() if "model" in r}
        bare = {code: {k: v for k, v in r.items() if k != "model"} for code, r in given.items()}
        super().__init__(path, endpoint, responses=bare, **kw)

    def document_responses(self) -> None:
        """Build the answers' fields, as FastAPI would have, for the document."""
        self.response_fields = {
            code: create_model_field(
                name=f"Response_{code}_{self.unique_id}", type_=model, mode="serialization"
            )
            for code, model in self.response_models.items()
        }


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra``: its body is ``model``'s, rendered with the document
    (not as the route is made: a cold start renders none)."""
    name = f"{model.__module__}.{model.__qualname__}"
    _BODY_MODELS[name] = model
    return {"requestBody": {_BODY_MODEL: name}}


_BODY_MODEL = "x-body-model"
_BODY_MODELS: dict[str, type[BaseModel]] = {}

# Active versions per model, as the registry has them now.
ServedModels = Callable[[], dict[str, list[ModelVersion]]]


def finish(app: FastAPI, served: ServedModels) -> None:
    """Complete the document FastAPI builds: the request bodies, each model's own
    (``served`` says which models there are and what their versions take), the
    ``x-api-key`` header on every ``/v1/`` operation (API Gateway checks it before
    the router runs, so no route reads it), parameters without the ``null`` an
    optional one gets (a header or a query value is absent or a string, never
    JSON's null), and the answers' body schemas, which :class:`DocumentedLater`
    routes leave to this first build."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            for route in app.routes:
                if isinstance(route, DocumentedLater):
                    route.document_responses()
            document = build()
            _each_models_own(document["paths"], served())
            schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes[API_KEY_SCHEME] = {"type": "apiKey", "in": "header", "name": "x-api-key"}
            for path, operations in document["paths"].items():
                for operation in operations.values():
                    _render_body(operation)
                    if path.startswith(("/v1/", "/openai/", "/v2")):
                        operation["security"] = [{API_KEY_SCHEME: []}]
                    if path.startswith(("/openai/", "/v2")):
                        # A malformed parameter there is the API's 400, not FastAPI's 422.
                        operation["responses"].pop("422", None)
                    for parameter in operation.get("parameters", []):
                        _drop_null(parameter["schema"])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _render_body(operation: dict[str, Any]) -> None:
    body = operation.get("requestBody")
    if body is not None and _BODY_MODEL in body:
        model = _BODY_MODELS[body.pop(_BODY_MODEL)]
        body.update(_json_body(request_schema(model)))


def _json_body(schema: dict[str, Any], examples: dict[str, Any] | None = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = {name: {"value": value} for name, value in examples.items()}
    return {"required": True, "content": {"application/json": media}}


# A model's own path: the route's path with the model named, and its body.
_OWN_PATHS = ("/v1/models/{model}/predict", "/v1/models/{model}/generate")
# The OpenAI-compatible routes, whose bodies name their model: one body per model.
_NAMED_IN_BODY = (
    "/openai/v1/completions",
    "/openai/v1/chat/completions",
    "/openai/v1/embeddings",
)


def _each_models_own(paths: dict[str, Any], served: dict[str, list[ModelVersion]]) -> None:
    """Each model's own requests: a predict (and, for a model that generates, a
    generate) path per model, and the OpenAI bodies of the models that take them. A
    route no model takes is left out."""
    for template in _OWN_PATHS:
        item = paths.pop(template, None)
        for model, versions in served.items():
            own = _own_body(template, model, versions) if item else None
            if own is not None:
                paths[template.replace("{model}", model)] = {
                    method: _for_model(operation, model, *own) for method, operation in item.items()
                }
    for path in _NAMED_IN_BODY:
        bodies = [
            own
            for model, versions in served.items()
            if (own := _own_body(path, model, versions)) is not None
        ]
        if not bodies:
            paths.pop(path, None)
            continue
        schemas = [schema for schema, _ in bodies]
        examples = {name: value for _, example in bodies for name, value in example.items()}
        schema = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
        for operation in paths.get(path, {}).values():
            operation["requestBody"] = _json_body(schema, examples)


def _for_model(
    operation: dict[str, Any], model: str, schema: dict[str, Any], examples: dict[str, Any]
) -> dict[str, Any]:
    own = copy.deepcopy(operation)
    own["operationId"] = f"{own['operationId']}_{model}"
    own["parameters"] = [
        p for p in own.get("parameters", []) if (p["in"], p["name"]) != ("path", "model")
    ]
    own["requestBody"] = _json_body(schema, examples)
    return own


def _own_body(
    path: str, model: str, versions: list[ModelVersion]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``model``'s body of the route at ``path`` and an example of it, or None where
    the model takes none (no active version, or not its task)."""
    if not versions:
        return None
    newest = max(versions, key=lambda v: v.created_at)
    generative = [v.signature for v in versions if v.signature.kind == "generation"]
    if path.endswith("/predict"):
        signatures = tuple(dict.fromkeys(v.signature for v in versions))
        max_inputs = min(v.max_inputs_per_request for v in versions)
        body = predict_body_for(model, signatures, max_inputs)
        return request_schema(body), {model: {"inputs": [_example_input(newest)]}}
    if path.endswith("/embeddings"):
        if not embeds(versions):
            return None
        max_inputs = min(v.max_inputs_per_request for v in versions)
        body = embeddings_body_for(model, newest.signature, max_inputs)  # type: ignore[arg-type]
        return request_schema(body), {model: {"model": model, "input": ["a sentence to embed"]}}
    if not generates(versions):
        return None
    signature = generative[-1]
    tokens = min(16, signature.max_tokens)  # type: ignore[union-attr]
    if path.endswith("/generate"):
        example: dict[str, Any] = {"prompt": "Return the", "max_tokens": tokens, "stream": True}
        return request_schema(generate_body_for(signature)), {model: example}  # type: ignore[arg-type]
    if path.endswith("/chat/completions"):
        turn = {"role": "user", "content": "What does open do?"}
        example = {"model": model, "messages": [turn], "max_tokens": tokens}
        return request_schema(chat_body_for(model, signature)), {model: example}  # type: ignore[arg-type]
    example = {"model": model, "prompt": "Return the", "max_tokens": tokens, "stream": True}
    return request_schema(completion_body_for(model, signature)), {model: example}  # type: ignore[arg-type]


def _example_input(version: ModelVersion) -> Any:
    signature = version.signature
    if signature.kind == "tensor":
        (length,) = signature.shape
        return [signature.minimum or 0] * length
    if signature.kind == "text":
        return "a sentence to embed"
    return "Return the"


def _drop_null(schema: dict[str, Any]) -> None:
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    if len(options) == 1:
        del schema["anyOf"]
        schema.update(options[0])


class JobCounts(TypedDict):
    total: int | None  # lines in the file, once it is read to the end
    read: int
    done: int  # lines answered (an output or an error)
    failed: int  # of those, lines with an error
    refused: int  # lines that were not valid input


class JobView(TypedDict):
    """A batch job as it stands; ``output_uri`` once it succeeded."""

    job_id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    model: str
    version: str
    source: str
    location: str
    counts: JobCounts
    progress: float
    timings: dict[str, float | None]
    output_uri: str | None
    failure: str | None  # why a failed job failed
    callback_url: str | None
    callback: list[str] | None  # what each delivery try got
    errors: list[dict[str, Any]]


class JobPage(TypedDict):
    jobs: list[JobView]
    next: str | None


class JobAlreadyFinished(JobView):
    code: Literal["already_finished"]
    message: str


_UNKNOWN_JOB = {"model": ErrorBody, "description": "No such job for this API key"}

JOB_SUBMIT = {
    202: {"model": JobView, "description": "A new job; poll its location"},
    200: {"model": JobView, "description": "The same file again: the job it made"},
    400: {"model": ErrorBody, "description": "A body that is not JSON"},
    404: {"model": ErrorBody, "description": "Unknown model, or no such file"},
    413: _gateway("A body over API Gateway's payload limit", PAYLOAD_TOO_LARGE),
    422: {"model": ErrorBody, "description": "A body that does not match the schema"},
    **COMMON,
}
JOB_LIST = {
    200: {"model": JobPage, "description": "The caller's jobs, newest first"},
    422: {"model": ErrorBody, "description": "A limit or cursor out of range"},
    **COMMON,
}
JOB = {
    200: {"model": JobView, "description": "The job as it stands"},
    404: _UNKNOWN_JOB,
    422: {"model": ErrorBody, "description": "A job id over 64 characters"},
    **COMMON,
}
JOB_CANCEL = {
    200: {"model": JobView, "description": "Cancelled"},
    404: _UNKNOWN_JOB,
    409: {"model": JobAlreadyFinished, "description": "The job had already ended"},
    422: {"model": ErrorBody, "description": "A job id over 64 characters"},
    **COMMON,
}


# -- the Open Inference Protocol v2 (switchyard_router.oip) -----------------------------


class ProtocolError(TypedDict):
    """The protocol's error body: what went wrong, naming the field at fault."""

    error: str


class ProtocolTensor(TypedDict):
    name: str
    datatype: str
    shape: list[int]


class ProtocolOutput(ProtocolTensor):
    """An output: its elements in ``data``, or ``parameters.binary_data_size`` raw
    bytes after the JSON header (``Inference-Header-Content-Length``)."""

    data: NotRequired[list[Any]]
    parameters: NotRequired[dict[str, Any]]


class ProtocolModel(TypedDict):
    """A model's metadata: its active versions, the engine that runs it, and its
    tensors (-1: any length)."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[ProtocolTensor]
    outputs: list[ProtocolTensor]


class ProtocolModelReady(TypedDict):
    name: str
    version: NotRequired[str]
    ready: bool


class ProtocolLive(TypedDict):
    live: bool


class ProtocolReady(TypedDict):
    ready: bool


class ProtocolServer(TypedDict):
    name: str
    version: str
    extensions: list[str]


class ProtocolInference(TypedDict):
    """An inference's outputs (``id``: the request's, else the platform's request id)."""

    model_name: str
    model_version: str
    id: str
    outputs: list[ProtocolOutput]


_PROTOCOL_COMMON: dict[int | str, dict[str, Any]] = {
    **COMMON,
    405: {**COMMON[405], "model": ProtocolError},
    500: {"model": ProtocolError, "description": "The platform failed to handle the request"},
}
_PROTOCOL_NAME = {"model": ProtocolError, "description": "A name over 64 characters"}
_PROTOCOL_UNKNOWN = {
    "model": ProtocolError,
    "description": "Unknown model, a model with no active version, or a version that is not active",
}
OIP_LIVE = {200: {"model": ProtocolLive, "description": "The server is live"}, **_PROTOCOL_COMMON}
OIP_READY = {
    200: {"model": ProtocolReady, "description": "The server is ready"},
    **_PROTOCOL_COMMON,
}
OIP_SERVER = {
    200: {"model": ProtocolServer, "description": "The server's metadata"},
    **_PROTOCOL_COMMON,
}
OIP_MODEL = {
    400: _PROTOCOL_NAME,
    200: {"model": ProtocolModel, "description": "The model's metadata"},
    404: _PROTOCOL_UNKNOWN,
    **_PROTOCOL_COMMON,
}
OIP_MODEL_READY = {
    400: _PROTOCOL_NAME,
    200: {"model": ProtocolModelReady, "description": "Ready: it has an active version"},
    404: _PROTOCOL_UNKNOWN,
    **_PROTOCOL_COMMON,
}
OIP_INFER: dict[int | str, dict[str, Any]] = {
    **_PROTOCOL_COMMON,
    200: {
        "model": ProtocolInference,
        "description": "The outputs (with binary outputs: application/octet-stream, the "
        "JSON header then the raw tensors, its length in Inference-Header-Content-Length)",
        "headers": _ROUTED,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    },
    202: {
        "model": ProtocolError,
        "description": "Queued: the deadline passed first; the result will be at the Location",
        "headers": {"Location": _header("Where the result will be"), **_ROUTED},
    },
    400: {
        "model": ProtocolError,
        "description": "A malformed request, or inputs the model's signature refuses (the "
        "field is named)",
    },
    404: _PROTOCOL_UNKNOWN,
    409: {"model": ProtocolError, "description": "The request was cancelled while it waited"},
    413: _gateway("A body over API Gateway's payload limit", PAYLOAD_TOO_LARGE),
    429: _over_a_cap(ProtocolError),
    500: {"model": ProtocolError, "description": "The model failed, or the platform did"},
    504: {"model": ProtocolError, "description": "The work expired before it could run"},
}
