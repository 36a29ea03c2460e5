"""The OpenAI-compatible API under ``/openai/v1``: ``models``, ``completions``,
``chat/completions`` (streamed or not) and ``embeddings``, so that the official
``openai`` client works unchanged with ``base_url=<api>/openai/v1`` and a tenant's
API key (sent as ``Authorization: Bearer``).

Each call becomes the platform's own request (a generation request, or a predict
of the embedding model) and goes through the same admission, queues and workers;
only the shapes differ. Errors have OpenAI's body
(``{"error": {"message", "type", "param", "code"}}``) and statuses: 400 for a bad
parameter, 404 for an unknown model, 401/403 for a key, 429 over a usage plan.
What the platform does not do (``n`` > 1, log probabilities, tools, penalties) is
refused with 400 and the parameter's name, never ignored.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from switchyard.fields import FieldError
from switchyard.generation import CHAT_ROLES, CHAT_STOP, MAX_STOPS, render_chat
from switchyard.schemas import ResultRecord, TextSignature
from switchyard_router import api_document
from switchyard_router.answers import (
    DeadlineHeader,
    JSONResponse,
    cache_allowed,
    emit_answered,
    failure_of,
    json_body,
    queued,
    routed_headers,
)
from switchyard_router.bodies import read_body
from switchyard_router.deps import RouterDeps
from switchyard_router.generate_api import GenerationCall, generate
from switchyard_router.logic import Admitted, RequestRejected
from switchyard_router.streaming import Ending, Piece, sse

PREFIX = "/openai/v1"

# Parameters accepted only at the value that means "not used".
_NEUTRAL = {
    "n": (1, None),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (False, None),
    "best_of": (1, None),
    "suffix": (None,),
    "logit_bias": (None,),
    "tools": (None,),
    "tool_choice": (None, "none"),
    "parallel_tool_calls": (None,),
    "response_format": (None, {"type": "text"}),
}
_IGNORED = {"user", "stream_options", "metadata", "store", "service_tier"}
_COMMON = {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream"}


_SAMPLING = {
    "model": {"type": "string", "minLength": 1, "description": "A model (GET models)"},
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "seed": {"type": "integer", "minimum": 0},
    "stop": {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": 64},
            {
                "type": "array",
                "maxItems": MAX_STOPS,
                "items": {"type": "string", "minLength": 1, "maxLength": 64},
            },
            {"type": "null"},
        ]
    },
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
        "additionalProperties": False,
    },
    "n": {"const": 1},
    "user": {"type": "string"},
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional OpenAI parameter: its value, or null for "not given"."""
    return {"anyOf": [schema, {"type": "null"}]}


def _body(required: list[str], properties: dict[str, Any], example: dict[str, Any]) -> dict:
    properties = {
        name: schema if name in required or name == "stop" else _nullable(schema)
        for name, schema in properties.items()
    }
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": required,
                        "additionalProperties": False,
                        "properties": properties,
                    },
                    "example": example,
                }
            },
        }
    }


COMPLETION_BODY = _body(
    ["model", "prompt"],
    {**_SAMPLING, "prompt": {"type": "string", "minLength": 1, "pattern": "\\S"}},
    {"model": "pydoc-gpt", "prompt": "Return the", "max_tokens": 16, "stream": True},
)
CHAT_BODY = _body(
    ["model", "messages"],
    {
        **_SAMPLING,
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "additionalProperties": False,  # a name or tool calls would be ignored
                "properties": {
                    "role": {"enum": sorted(CHAT_ROLES)},
                    "content": {"type": "string"},
                },
            },
        },
    },
    {"model": "pydoc-gpt", "messages": [{"role": "user", "content": "What does open do?"}]},
)
EMBEDDINGS_BODY = _body(
    ["model", "input"],
    {
        "model": _SAMPLING["model"],
        "input": {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            ]
        },
        "encoding_format": {"enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 1},
        "user": {"type": "string"},
    },
    {"model": "minilm-embed", "input": ["a sentence to embed"]},
)


def is_openai_path(path: str) -> bool:
    return "/openai/v1/" in path or path.endswith("/openai/v1")


def error_body(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error shape; 422 (the platform's invalid input) is OpenAI's 400."""
    status = 400 if status == 422 else status
    kind = {
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
    )


def _bad(param: str, message: str) -> RequestRejected:
    return RequestRejected(400, "invalid_parameter", message, [FieldError(param, message)])


def _object(body: bytes) -> dict[str, Any]:
    document = json_body(body)
    if not isinstance(document, dict):
        raise _bad("body", "the body must be a JSON object")
    if not isinstance(document.get("model"), str) or not document["model"]:
        raise _bad("model", "model is required: a model's name (GET /openai/v1/models)")
    return document


def _check_known(document: dict[str, Any], allowed: set[str]) -> None:
    if document.get("user") is not None and not isinstance(document["user"], str):
        raise _bad("user", "user must be a string")
    options = document.get("stream_options")
    if options is not None and (
        not isinstance(options, dict)
        or set(options) - {"include_usage"}
        or not isinstance(options.get("include_usage", False), bool)
    ):
        raise _bad("stream_options", "stream_options takes include_usage, a boolean")
    for name, value in document.items():
        if name in allowed or name in _IGNORED:
            continue
        if name in _NEUTRAL:
            if not _neutral(value, _NEUTRAL[name]):
                raise _bad(name, f"{name}={json.dumps(value)} is not supported by this platform")
            continue
        raise _bad(name, f"unrecognized request argument: {name}")


def _only(part: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """A part of the body (a message, a content part) holding nothing but ``allowed``."""
    for name in part:
        if name not in allowed:
            raise _bad(f"{where}.{name}", f"unrecognized argument in {where}: {name}")


def _each_string(items: list[Any], field: str, what: str) -> None:
    """Every item of the list ``field`` a string; the first that is not is named."""
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _bad(f"{field}[{i}]", f"each {what} must be a string")


def _neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of the ``neutral`` values, of its JSON type too: true
    is no ``n`` of 1, and 0 no ``logprobs`` of false."""
    return any(value is v or (type(value) is type(v) and value == v) for v in neutral)


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list):
        raise _bad("stop", "stop must be a string or a list of strings")
    _each_string(stops, "stop", "stop sequence")
    if len(stops) > MAX_STOPS:
        raise _bad("stop", f"at most {MAX_STOPS} stop sequences")
    return stops


def _sampling(document: dict[str, Any], max_tokens: Any) -> dict[str, Any]:
    """The generation request's sampling fields, as given (the signature checks
    their values and names the field)."""
    stream = document.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream", "stream must be a boolean")
    request: dict[str, Any] = {"stream": bool(stream)}
    for name in ("temperature", "top_p"):
        if document.get(name) is not None:
            request[name] = document[name]
    if document.get("seed") is not None:
        request["seed"] = _whole(document["seed"], "seed", minimum=0)
    if max_tokens is not None:
        request["max_tokens"] = _whole(max_tokens, "max_tokens", minimum=1)
    return request


def _whole(value: Any, name: str, minimum: int) -> int:
    """A JSON integer (1.0 is one too), at least ``minimum``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
        or value != int(value)
    ):
        raise _bad(name, f"{name} must be an integer")
    if value < minimum:
        raise _bad(name, f"{name} must be at least {minimum}")
    return int(value)


def completion_request(document: dict[str, Any]) -> dict[str, Any]:
    _check_known(document, _COMMON | {"prompt"})
    prompt = document.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("prompt", "prompt must be a string (one prompt per request)")
    return {
        "prompt": prompt,
        "stop": _stops(document.get("stop")),
        **_sampling(document, document.get("max_tokens")),
    }


def chat_request(document: dict[str, Any]) -> dict[str, Any]:
    _check_known(document, _COMMON | {"messages", "max_completion_tokens"})
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "messages must be a non-empty list")
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(f"messages[{i}]", "each message must be an object with role and content")
        # what a message may say besides (a name, tool calls) would be ignored: refused
        _only(message, ("role", "content"), f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in CHAT_ROLES:
            raise _bad(f"messages[{i}].role", f"role must be one of {sorted(CHAT_ROLES)}")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise _bad(
                        f"messages[{i}].content[{j}]", "only text content parts are supported"
                    )
                _only(part, ("type", "text"), f"messages[{i}].content[{j}]")
                if not isinstance(part.get("text"), str):
                    raise _bad(f"messages[{i}].content[{j}].text", "text must be a string")
            content = "".join(part["text"] for part in content)
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content", "content must be a string")
        turns.append({"role": message["role"], "content": content})
    stops = _stops(document.get("stop"))
    # max_completion_tokens is OpenAI's newer name; given both, it wins, and the
    # older is still checked.
    max_tokens = document.get("max_completion_tokens")
    legacy = document.get("max_tokens")
    if max_tokens is None:
        max_tokens = legacy
    else:
        if legacy is not None:
            _whole(legacy, "max_tokens", minimum=1)
        max_tokens = _whole(max_tokens, "max_completion_tokens", minimum=1)
    return {
        "prompt": render_chat(turns),
        "stop": [*stops, CHAT_STOP],
        **_sampling(document, max_tokens),
    }


class _Completions:
    """``text_completion`` objects (and chunks)."""

    kind = "text_completion"
    prefix = "cmpl-"

    def __init__(self, model: str, include_usage: bool) -> None:
        self._model = model
        self._include_usage = include_usage
        self._created = int(time.time())

    def _envelope(self, admitted: Admitted, obj: str) -> dict[str, Any]:
        return {
            "id": f"{self.prefix}{admitted.request_id}",
            "object": obj,
            "created": self._created,
            "model": self._model,
            "system_fingerprint": f"{admitted.model}-{admitted.version}",
        }

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        """The choice of a whole answer."""
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def _streamed(self, text: str, finish: str | None) -> dict[str, Any]:
        """The choice of a streamed chunk."""
        return self._choice(text, finish)

    def answer(self, record: ResultRecord, admitted: Admitted) -> dict[str, Any]:
        output = (record.outputs or [{}])[0]
        return {
            **self._envelope(admitted, self.kind),
            "choices": [self._choice(output.get("text", ""), output.get("finish_reason"))],
            "usage": output.get("usage", {}),
        }

    def _chunk_kind(self) -> str:
        return self.kind

    def _opening(self, admitted: Admitted) -> list[bytes]:
        return []

    def events(self, admitted: Admitted, items: Iterator[Piece | Ending]) -> Iterator[bytes]:
        chunk = self._envelope(admitted, self._chunk_kind())
        usage_field = {"usage": None} if self._include_usage else {}
        yield from self._opening(admitted)
        for item in items:
            if isinstance(item, Piece):
                yield sse({**chunk, "choices": [self._streamed(item.text, None)], **usage_field})
                continue
            if item.failed:
                assert item.record is not None
                _, code = failure_of(item.record)
                error = item.record.error
                message = error.message if error else item.record.status
                yield sse(
                    {"error": {"message": message, "type": "server_error", "param": None,
                               "code": code}}
                )  # fmt: skip
                return
            yield sse({**chunk, "choices": [self._streamed("", item.finish_reason)], **usage_field})
            if self._include_usage:
                yield sse({**chunk, "choices": [], "usage": item.usage})
        yield sse("[DONE]")

    def failure(self, record: ResultRecord) -> Response:
        status, code = failure_of(record)  # error_body answers 422 as OpenAI's 400
        message = record.error.message if record.error else f"the request ended {record.status}"
        return error_body(status, code, message)


class _ChatCompletions(_Completions):
    kind = "chat.completion"
    prefix = "chatcmpl-"

    def _chunk_kind(self) -> str:
        return "chat.completion.chunk"

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
        }

    def _streamed(self, text: str, finish: str | None) -> dict[str, Any]:
        """Chat chunks carry deltas: the text a token added, or nothing."""
        return self._delta({"content": text} if text else {}, finish)

    def _delta(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def _opening(self, admitted: Admitted) -> list[bytes]:
        chunk = self._envelope(admitted, self._chunk_kind())
        usage_field = {"usage": None} if self._include_usage else {}
        return [
            sse(
                {
                    **chunk,
                    "choices": [self._delta({"role": "assistant", "content": ""}, None)],
                    **usage_field,
                }
            )
        ]


def add_openai_routes(app: FastAPI, deps: RouterDeps, tenant_of: Callable[[Request], str]) -> None:
    """Register the routes on the router app."""

    service = deps.service

    @app.get(f"{PREFIX}/models", tags=["openai"], responses=api_document.OPENAI_MODELS)
    def models(request: Request) -> Any:
        tenant_of(request)
        return {"object": "list", "data": [_model_object(e) for e in service.catalog()]}

    @app.get(f"{PREFIX}/models/{{model}}", tags=["openai"], responses=api_document.OPENAI_MODEL)
    def model(request: Request, model: str) -> Any:
        tenant_of(request)
        for entry in service.catalog():
            if entry["model"] == model:
                return _model_object(entry)
        raise RequestRejected(404, "model_not_found", f"The model {model!r} does not exist")

    async def _generation(request: Request, chat: bool, deadline_ms: int | None) -> Response:
        tenant = tenant_of(request)
        document = _object(await read_body(request, deps.max_body_bytes))
        body = chat_request(document) if chat else completion_request(document)
        options = document.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        fmt = (_ChatCompletions if chat else _Completions)(document["model"], include_usage)
        _known_model(service, document["model"])
        call = GenerationCall(
            model=document["model"],
            tenant=tenant,
            request=body,
            headers=dict(request.headers),
            deadline_ms=deadline_ms,
        )
        try:
            return await run_in_threadpool(
                generate, service, deps.stream, deps.results, call, fmt, deps.hub
            )
        except RequestRejected as exc:
            # Named as the caller sent them: the prompt is a chat's messages, rendered,
            # and its max_tokens the max_completion_tokens it gave.
            names = {"prompt": "messages"} if chat else {}
            if chat and document.get("max_completion_tokens") is not None:
                names["max_tokens"] = "max_completion_tokens"
            exc.rename_fields(lambda field: names.get(field, field))
            raise

    @app.post(
        f"{PREFIX}/completions",
        tags=["openai"],
        responses=api_document.OPENAI_GENERATE,
        openapi_extra=COMPLETION_BODY,
    )
    async def completions(request: Request, deadline_ms: DeadlineHeader = None) -> Response:
        return await _generation(request, chat=False, deadline_ms=deadline_ms)

    @app.post(
        f"{PREFIX}/chat/completions",
        tags=["openai"],
        responses=api_document.OPENAI_GENERATE,
        openapi_extra=CHAT_BODY,
    )
    async def chat_completions(request: Request, deadline_ms: DeadlineHeader = None) -> Response:
        return await _generation(request, chat=True, deadline_ms=deadline_ms)

    @app.post(
        f"{PREFIX}/embeddings",
        tags=["openai"],
        responses=api_document.OPENAI_EMBEDDINGS,
        openapi_extra=EMBEDDINGS_BODY,
    )
    async def embeddings(request: Request, deadline_ms: DeadlineHeader = None) -> Response:
        tenant = tenant_of(request)
        document = _object(await read_body(request, deps.max_body_bytes))
        _check_known(document, {"model", "input", "encoding_format", "dimensions"})
        model = document["model"]
        _known_model(service, model)
        inputs = document.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list):
            raise _bad("input", "input must be a string or a list of strings")
        _each_string(inputs, "input", "input")
        encoding = document.get("encoding_format")
        encoding = "float" if encoding is None else encoding  # ({} or "" is no null)
        if encoding not in ("float", "base64"):
            raise _bad("encoding_format", "encoding_format must be 'float' or 'base64'")
        dimensions = document.get("dimensions")
        if dimensions is not None:
            dimensions = _whole(dimensions, "dimensions", minimum=1)
        versions = service.active_versions(model)
        if versions and not all(
            isinstance(v.signature, TextSignature) and v.runtime == "sentence-transformers"
            for v in versions
        ):
            raise RequestRejected(400, "wrong_task", f"model {model!r} does not embed text")
        return await run_in_threadpool(
            _embed, service, tenant, model, inputs, encoding, dimensions, dict(request.headers),
            deadline_ms,
        )  # fmt: skip


def _model_object(entry: dict[str, Any]) -> dict[str, Any]:
    """A catalog entry as OpenAI's model object (created: its first version's time)."""
    created = min((v["created_at"] for v in entry["versions"]), default=0)
    return {
        "id": entry["model"],
        "object": "model",
        "created": int(created),
        "owned_by": "switchyard",
    }


def _known_model(service: Any, model: str) -> None:
    if model not in service.models:
        raise RequestRejected(404, "model_not_found", f"The model {model!r} does not exist", [])


def _embed(
    service: Any,
    tenant: str,
    model: str,
    inputs: list[str],
    encoding: str,
    dimensions: int | None,
    headers: dict[str, str],
    deadline_ms: int | None,
) -> Response:
    with service.hold(tenant, "sync_requests"):
        try:
            admitted = service.submit(
                model=model,
                tenant=tenant,
                inputs=inputs,
                sticky_headers=headers,
                deadline_ms=deadline_ms,
                cache_lookup=cache_allowed(headers),
            )
        except RequestRejected as exc:
            # Named as the caller sent them: input, input[2] (the platform's inputs[2]).
            exc.rename_fields(lambda field: "input" + field.removeprefix("inputs"))
            raise
        record = service.wait(admitted, tenant)
    emit_answered(admitted, record)
    if record is None:  # past its deadline: 202 and where its result will be, as predict
        return queued(admitted, "")
    if record.status != "done" or record.outputs is None:
        code = record.error.code if record.error else record.status
        message = record.error.message if record.error else f"the request ended {record.status}"
        return error_body(400 if code == "invalid_input" else 500, code, message)
    if dimensions is not None and any(len(v) != dimensions for v in record.outputs):
        message = f"{model} embeds in {len(record.outputs[0])} dimensions"
        return error_body(400, "wrong_dimensions", message, "dimensions")
    data = []
    for i, vector in enumerate(record.outputs):
        embedding: Any = vector
        if encoding == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    tokens = sum(len(text.split()) for text in inputs)
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        },
        headers={**routed_headers(admitted), "x-model-version": record.version},
    )
