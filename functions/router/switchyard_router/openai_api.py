"""The OpenAI-compatible API under ``/openai/v1``: ``models``, ``completions``,
``chat/completions`` (streamed or not) and ``embeddings``, so that the official
``openai`` client works unchanged with ``base_url=<api>/openai/v1`` and a tenant's
API key (sent as ``Authorization: Bearer``).

Each call becomes the platform's own request (a generation request, or a predict
of the embedding model) and goes through the same admission, queues and workers;
only the shapes differ. Each body is validated by its model (``switchyard.bodies``).
Errors have OpenAI's body (``{"error": {"message", "type", "param", "code"}}``) and
statuses: 400 for a bad parameter or an input the model refuses, 404 for an unknown
model, 401/403 for a key, 429 over a usage plan; a request's outcome has the status
it has on the native routes (cancelled 409, expired 504). What the platform does
not do (``n`` > 1, log probabilities, tools, penalties) is refused with 400 and the
parameter's name, never ignored.
"""

from __future__ import annotations

import base64
import math
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from switchyard.bodies import ChatBody, CompletionBody, EmbeddingsBody, embeds
from switchyard.fields import FieldError
from switchyard.generation import CHAT_STOP, render_chat
from switchyard_router import api_document
from switchyard_router.answers import (
    DeadlineHeader,
    JSONResponse,
    base_path,
    cache_allowed,
    emit_answered,
    queued,
    routed_headers,
)
from switchyard_router.bodies import Refusal, read_model, validated
from switchyard_router.deps import RouterDeps
from switchyard_router.generate_api import GenerationCall, generate
from switchyard_router.idempotent import IdempotencyHeader, idempotent
from switchyard_router.logic import Idempotent, PredictService, RequestRejected
from switchyard_router.outcome import Admitted, Outcome
from switchyard_router.streaming import Ending, Piece, sse

PREFIX = "/openai/v1"

# A body its model (``switchyard.bodies``) refuses: OpenAI's 400, the parameter named.
OPENAI_REFUSAL = Refusal(400, "invalid_parameter", "a parameter is not valid")


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


def completion_request(document: Any) -> dict[str, Any]:
    """The generation request of a completions body (``CompletionBody``)."""
    return validated(CompletionBody, document, OPENAI_REFUSAL).generation()


def chat_request(document: Any) -> dict[str, Any]:
    """The generation request of a chat completions body (``ChatBody``)."""
    return chat_generation(validated(ChatBody, document, OPENAI_REFUSAL))


def chat_generation(body: ChatBody) -> dict[str, Any]:
    """A chat as a generation: its turns rendered as the prompt, the end of a turn
    as a stop sequence, and ``max_completion_tokens`` (OpenAI's newer name, which
    wins) as ``max_tokens``."""
    max_tokens = body.max_completion_tokens
    return {
        "prompt": render_chat(body.turns()),
        "stop": [*body.stops(), CHAT_STOP],
        **body.sampling(body.max_tokens if max_tokens is None else max_tokens),
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

    def answer(self, outcome: Outcome) -> dict[str, Any]:
        assert outcome.record is not None
        output = (outcome.record.outputs or [{}])[0]
        return {
            **self._envelope(outcome.admitted, self.kind),
            "choices": [self._choice(output.get("text", ""), output.get("finish_reason"))],
            "usage": output.get("usage", {}),
        }

    def _chunk_kind(self) -> str:
        return self.kind

    def _opening(self, admitted: Admitted) -> list[bytes]:
        return []

    def events(self, admitted: Admitted, groups: Iterator[list[Piece | Ending]]) -> Iterator[bytes]:
        """A chunk object per group's text (the text of all its tokens: a chunk's
        ``text`` or ``delta.content`` holds any amount), then the ending's."""
        chunk = self._envelope(admitted, self._chunk_kind())
        usage_field = {"usage": None} if self._include_usage else {}
        yield from self._opening(admitted)
        for group in groups:
            events = []
            text = "".join(item.text for item in group if isinstance(item, Piece))
            if text:
                events.append(
                    sse({**chunk, "choices": [self._streamed(text, None)], **usage_field})
                )
            ending = group[-1]
            if not isinstance(ending, Ending):
                yield b"".join(events)
                continue
            if ending.failed:
                assert ending.record is not None
                ended = Outcome(admitted, ending.record)
                events.append(sse(
                    {"error": {"message": ended.message, "type": "server_error", "param": None,
                               "code": ended.code}}
                ))  # fmt: skip
                yield b"".join(events)
                return
            finish = self._streamed("", ending.finish_reason)
            events.append(sse({**chunk, "choices": [finish], **usage_field}))
            if self._include_usage:
                events.append(sse({**chunk, "choices": [], "usage": ending.usage}))
            yield b"".join(events)
        yield sse("[DONE]")

    def failure(self, outcome: Outcome) -> Response:
        # error_body answers 422 as OpenAI's 400
        return error_body(outcome.status, outcome.code, outcome.message)


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

    async def _generation(
        request: Request, chat: bool, deadline_ms: int | None, key: str | None
    ) -> Response:
        tenant = tenant_of(request)
        limit = deps.max_body_bytes
        body: CompletionBody | ChatBody
        if chat:
            body = await read_model(request, limit, ChatBody, OPENAI_REFUSAL)
            generation = chat_generation(body)
        else:
            body = await read_model(request, limit, CompletionBody, OPENAI_REFUSAL)
            generation = body.generation()
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        fmt = (_ChatCompletions if chat else _Completions)(body.model, include_usage)
        _known_model(service, body.model)
        if isinstance(body, ChatBody):
            _check_overridden_max_tokens(service, body)
        call = GenerationCall(
            model=body.model,
            tenant=tenant,
            request=generation,
            headers=dict(request.headers),
            deadline_ms=deadline_ms,
            base_path=base_path(request),
            idempotent=idempotent(key, "openai chat" if chat else "openai completions", body),
        )
        try:
            return await run_in_threadpool(
                generate, service, deps.stream, deps.results, call, fmt, deps.hub
            )
        except RequestRejected as exc:
            # Named as the caller sent them: the prompt is a chat's messages, rendered,
            # and its max_tokens the max_completion_tokens it gave.
            names = {"prompt": "messages"} if chat else {}
            if isinstance(body, ChatBody) and body.max_completion_tokens is not None:
                names["max_tokens"] = "max_completion_tokens"
            exc.rename_fields(lambda field: names.get(field, field))
            raise

    @app.post(
        f"{PREFIX}/completions",
        tags=["openai"],
        responses=api_document.OPENAI_GENERATE,
        openapi_extra=api_document.request_body(CompletionBody),
    )
    async def completions(
        request: Request, deadline_ms: DeadlineHeader = None, key: IdempotencyHeader = None
    ) -> Response:
        return await _generation(request, chat=False, deadline_ms=deadline_ms, key=key)

    @app.post(
        f"{PREFIX}/chat/completions",
        tags=["openai"],
        responses=api_document.OPENAI_GENERATE,
        openapi_extra=api_document.request_body(ChatBody),
    )
    async def chat_completions(
        request: Request, deadline_ms: DeadlineHeader = None, key: IdempotencyHeader = None
    ) -> Response:
        return await _generation(request, chat=True, deadline_ms=deadline_ms, key=key)

    @app.post(
        f"{PREFIX}/embeddings",
        tags=["openai"],
        responses=api_document.OPENAI_EMBEDDINGS,
        openapi_extra=api_document.request_body(EmbeddingsBody),
    )
    async def embeddings(
        request: Request, deadline_ms: DeadlineHeader = None, key: IdempotencyHeader = None
    ) -> Response:
        tenant = tenant_of(request)
        body = await read_model(request, deps.max_body_bytes, EmbeddingsBody, OPENAI_REFUSAL)
        _known_model(service, body.model)
        if not embeds(service.active_versions(body.model)):
            raise RequestRejected(400, "wrong_task", f"model {body.model!r} does not embed text")
        call = EmbeddingCall(
            tenant,
            body,
            dict(request.headers),
            deadline_ms,
            base_path(request),
            idempotent(key, "openai embeddings", body),
        )
        return await run_in_threadpool(_embed, service, call)


def _check_overridden_max_tokens(service: PredictService, body: ChatBody) -> None:
    """A chat's ``max_tokens``, where ``max_completion_tokens`` overrides it, is still
    held to the model's limit, as the document states (the signature checks the one
    that is used)."""
    if body.max_tokens is None or body.max_completion_tokens is None:
        return
    for version in service.active_versions(body.model):
        limit = getattr(version.signature, "max_tokens", None)
        if limit is not None and body.max_tokens > limit:
            why = f"is {body.max_tokens}; at most {limit} allowed"
            message = f"max_tokens does not match {body.model}'s generation signature"
            raise RequestRejected(400, "invalid_input", message, [FieldError("max_tokens", why)])


def _model_object(entry: dict[str, Any]) -> dict[str, Any]:
    """A catalog entry as OpenAI's model object (created: its first version's time)."""
    created = min((v["created_at"] for v in entry["versions"]), default=0)
    return {
        "id": entry["model"],
        "object": "model",
        "created": int(created),
        "owned_by": "switchyard",
    }


def _known_model(service: PredictService, model: str) -> None:
    if model not in service.models:
        raise RequestRejected(404, "model_not_found", f"The model {model!r} does not exist", [])


@dataclass(frozen=True)
class EmbeddingCall:
    tenant: str
    body: EmbeddingsBody
    headers: dict[str, str]
    deadline_ms: int | None
    base_path: str
    idempotent: Idempotent | None = None


def _embed(service: PredictService, call: EmbeddingCall) -> Response:
    body = call.body
    with service.hold(call.tenant, "sync_requests"):
        try:
            admitted = service.submit(
                model=body.model,
                tenant=call.tenant,
                inputs=body.texts(),
                sticky_headers=call.headers,
                deadline_ms=call.deadline_ms,
                cache_lookup=cache_allowed(call.headers),
                idempotent=call.idempotent,
            )
        except RequestRejected as exc:
            # Named as the caller sent them: input, input[2] (the platform's inputs[2]).
            exc.rename_fields(lambda field: "input" + field.removeprefix("inputs"))
            raise
        outcome = service.answer(admitted)
    emit_answered(outcome)
    if outcome.record is None:  # past its deadline: 202 and where its result will be
        return queued(outcome, call.base_path)
    if outcome.kind != "done":
        return error_body(outcome.status, outcome.code, outcome.message)
    vectors = outcome.record.outputs or []
    if body.dimensions is not None:
        if any(len(v) < body.dimensions for v in vectors):
            message = f"{body.model} embeds in {len(vectors[0])} dimensions"
            return error_body(400, "wrong_dimensions", message, "dimensions")
        vectors = [shortened(v, body.dimensions) for v in vectors]
    data = []
    for i, vector in enumerate(vectors):
        embedding: Any = vector
        if body.encoding_format == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    tokens = sum(len(text.split()) for text in body.texts())
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        },
        headers={**routed_headers(admitted), "x-model-version": outcome.record.version},
    )


def shortened(vector: list[float], dimensions: int) -> list[float]:
    """An embedding's first ``dimensions`` numbers, scaled back to length 1, as
    OpenAI shortens its embeddings (``dimensions``)."""
    if len(vector) == dimensions:
        return vector
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm else head
