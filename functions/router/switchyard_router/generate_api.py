"""One generation, from admission to the caller's last byte, for both APIs that
generate: the platform's own (``POST /v1/models/{model}/generate``) and the
OpenAI-compatible one (``/openai/v1/completions`` and ``chat/completions``).

A generation is admitted like any request (``PredictService.submit``: the version,
its signature, the context check, the realtime queue). Then:
- async: 202 and its location, as for predict (streamed or not: nothing reads an
  async request's stream, its answer is its record);
- not streamed: the router waits for the result up to the deadline, as for predict;
- streamed: the router waits, up to the deadline, for the first token; then it
  answers 200 and passes tokens on as server-sent events as the worker writes them
  (``TokenReader``), a chunk's events in one write, until the generation ends or
  ``MAX_STREAM_SECONDS`` pass. A deadline with no first token is answered 202 and
  the location, like any request that outlives its deadline.

The service answers with an ``Outcome`` (``switchyard_router.outcome``), whose
status is the same on every route; each API formats it and the stream's events its
own way (a :class:`Format`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio
from fastapi.responses import Response, StreamingResponse

from switchyard.admission import Kind, Slot
from switchyard.bodies import generates
from switchyard.generation import TokenStream
from switchyard.results import ResultStore
from switchyard_router.answers import JSONResponse, emit_answered, queued, routed_headers
from switchyard_router.logic import Idempotent, PredictService, RequestRejected
from switchyard_router.outcome import Admitted, Outcome
from switchyard_router.streaming import (
    SSE_HEADERS,
    Ending,
    Piece,
    StreamHub,
    TokenReader,
    sse,
)

# A stream is cut after this long (API Gateway's REST response streaming allows
# up to 15 minutes; a generation of 256 tokens takes seconds).
MAX_STREAM_SECONDS = 300


log = logging.getLogger("switchyard.router")


class Format(Protocol):
    """How one API answers a generation."""

    def answer(self, outcome: Outcome) -> dict[str, Any]:
        """A generation that is done, whole."""
        ...

    def events(self, admitted: Admitted, groups: Iterator[list[Piece | Ending]]) -> Iterator[bytes]:
        """The stream's events, one bytes (one write) per group: what a chunk, or the
        chunks read together, added."""
        ...

    def failure(self, outcome: Outcome) -> Response:
        """A generation that ended without its text (failed, expired, cancelled)."""
        ...


def formatted(fmt: Format, outcome: Outcome, base: str) -> Response:
    """A whole (not streamed) generation's outcome, in ``fmt``'s shapes."""
    if outcome.record is None:
        return queued(outcome, base)
    if outcome.kind != "done":
        return fmt.failure(outcome)
    return JSONResponse(fmt.answer(outcome), headers=routed_headers(outcome.admitted))


@dataclass
class GenerationCall:
    model: str
    tenant: str
    request: dict[str, Any]  # a generation request (switchyard.generation)
    headers: Mapping[str, str]
    deadline_ms: int | None = None
    is_async: bool = False
    pinned: str | None = None
    base_path: str = ""
    # Its Idempotency-Key: honoured unless it streams (a stream is not replayed).
    idempotent: Idempotent | None = None


def request_field(field: str) -> str:
    """A field of a generation as its caller named it. The request is submitted as
    the one input of the version's signature (``inputs[0].temperature``); its caller
    sent ``temperature``, and the request as a whole is the body."""
    return field.removeprefix("inputs[0].").removeprefix("inputs[0]") or "body"


def require_generative(service: PredictService, model: str) -> None:
    """A model that does not generate is refused before anything is queued."""
    if model not in service.models:
        raise RequestRejected(404, "unknown_model", f"model {model!r} does not exist")
    versions = service.active_versions(model)
    if versions and not generates(versions):
        raise RequestRejected(400, "wrong_task", f"model {model!r} does not generate text", [])


def generate(
    service: PredictService,
    stream: TokenStream | None,
    results: ResultStore,
    call: GenerationCall,
    fmt: Format,
    hub: StreamHub | None = None,
) -> Response:
    require_generative(service, call.model)
    if call.is_async:
        if call.request.get("stream") is True:
            # Nothing reads an async request's stream: its answer is its record.
            call = replace(call, request={**call.request, "stream": False})
        return _generate(service, stream, results, call, fmt, hub, None)
    if call.request.get("stream") and service.budgets is not None:
        service.budgets.admit_stream(call.tenant)  # a stream has no batch lane to go to
    # Held until the caller has its answer: a stream's slot until its last event.
    kind: Kind = "streams" if call.request.get("stream") else "sync_requests"
    slot = service.take_slot(call.tenant, kind)
    try:
        return _generate(service, stream, results, call, fmt, hub, slot)
    except BaseException:
        service.give_slot(slot)
        raise


def _generate(
    service: PredictService,
    stream: TokenStream | None,
    results: ResultStore,
    call: GenerationCall,
    fmt: Format,
    hub: StreamHub | None,
    slot: Slot | None,
) -> Response:
    """:func:`generate` once admitted; ``slot`` is given back here when the answer
    is whole, and at a stream's end when it streams."""
    try:
        admitted = service.submit(
            model=call.model,
            tenant=call.tenant,
            inputs=[call.request],
            sticky_headers=call.headers,
            deadline_ms=call.deadline_ms,
            is_async=call.is_async,
            pinned=call.pinned,
            idempotent=None if call.request.get("stream") else call.idempotent,
        )
    except RequestRejected as exc:
        if exc.code == "invalid_input":
            exc.message = f"the request does not match {call.model}'s generation signature"
        exc.rename_fields(request_field)
        raise
    if call.is_async:
        return queued(service.answer(admitted, wait=False), call.base_path)
    if not call.request.get("stream") or stream is None:
        outcome = service.answer(admitted)
        service.give_slot(slot)
        emit_answered(outcome)
        return formatted(fmt, outcome, call.base_path)
    reader = TokenReader(stream, results, call.tenant, admitted.request_id, hub=hub)
    first = reader.first(admitted.deadline)
    failed = first[0] if first and isinstance(first[0], Ending) and first[0].failed else None
    # its first token or its end is here, or its deadline passed first
    outcome = Outcome(admitted, failed.record if failed else None)
    emit_answered(outcome)
    if first is None:
        service.give_slot(slot)
        service.hand_off(admitted)  # its Location reads the record (or the result)
        return queued(outcome, call.base_path)
    if failed is not None:
        service.give_slot(slot)
        return fmt.failure(outcome)
    # Its tokens flow: recorded now (one write), so that its caller can read it
    # (GET /v1/requests/{id}) or cancel it (DELETE) while it runs. Its stream slot
    # bounds it: it takes no place in its tenant's queued work.
    service.hand_off(admitted, counted=False)
    until = time.monotonic() + MAX_STREAM_SECONDS
    end = StreamEnd(service, reader, slot, call.tenant, admitted.request_id)

    def groups() -> Iterator[list[Piece | Ending]]:
        try:
            for group in itertools.chain([first], reader.rest(until)):
                end.reached |= isinstance(group[-1], Ending)
                yield group
        finally:
            end()

    return EndingStreamingResponse(
        fmt.events(admitted, groups()),
        on_end=end,
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **routed_headers(admitted)},
    )


class StreamEnd:
    """What a stream leaves behind when it ends, however it ends, done once: its
    reader closed, its slot given back, and, if the caller went away before the
    generation's end, the generation cancelled (its worker stops it: the worker
    looks at its running requests' records). Done at the stream's last event, or
    when its response ends without it (the caller gone): the response's generator
    is left suspended then, and closed only when the collector finds it, which
    could be minutes later on a quiet router, on whatever thread allocates then.
    So the once is kept without a lock: that thread may hold any lock (this one
    too) when the collector runs the generator's end."""

    def __init__(
        self,
        service: PredictService,
        reader: TokenReader,
        slot: Slot | None,
        tenant: str,
        request_id: str,
    ) -> None:
        self._service = service
        self._reader = reader
        self._slot = slot
        self._tenant = tenant
        self._request_id = request_id
        self.reached = False  # the generation's end was passed on
        self._once = [True]  # popped by the first call (one step under the GIL)

    def __call__(self) -> None:
        try:
            self._once.pop()
        except IndexError:
            return
        self._reader.close()
        self._service.give_slot(self._slot)
        if not self.reached:
            _cancel_quietly(self._service, self._tenant, self._request_id)


class EndingStreamingResponse(StreamingResponse):
    """A streamed answer that runs ``on_end`` (on a worker thread) once it is over:
    sent whole, or cut off by its caller going away."""

    def __init__(self, content: Any, *, on_end: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):  # run even while being cancelled
                await anyio.to_thread.run_sync(self._on_end)


def _cancel_quietly(service: Any, tenant: str, request_id: str) -> None:
    try:
        service.cancel(tenant, request_id)
    except Exception:  # noqa: BLE001 - it runs to its end instead
        log.exception("cancelling an abandoned stream failed", extra={"request_id": request_id})


class NativeFormat:
    """``POST /v1/models/{model}/generate``: ``data: {"token": ...}`` per token that
    adds text, then ``data: {"done": true, "finish_reason", "usage"}``; or one JSON
    answer."""

    def answer(self, outcome: Outcome) -> dict[str, Any]:
        record = outcome.record
        assert record is not None
        output = (record.outputs or [{}])[0]
        return {
            "request_id": record.request_id,
            "model": record.model,
            "version": record.version,
            "status": record.status,
            "text": output.get("text", ""),
            "finish_reason": output.get("finish_reason"),
            "usage": output.get("usage", {}),
        }

    def events(self, admitted: Admitted, groups: Iterator[list[Piece | Ending]]) -> Iterator[bytes]:
        for group in groups:
            yield b"".join(self._event(admitted, item) for item in group)

    def _event(self, admitted: Admitted, item: Piece | Ending) -> bytes:
        if isinstance(item, Piece):
            return sse({"token": item.text})
        if item.failed:
            assert item.record is not None
            ended = Outcome(admitted, item.record)
            return sse({"error": {"code": ended.code, "message": ended.message}})
        return sse(
            {
                "done": True,
                "request_id": admitted.request_id,
                "finish_reason": item.finish_reason,
                "usage": item.usage,
            }
        )

    def failure(self, outcome: Outcome) -> Response:
        assert outcome.record is not None
        return JSONResponse(
            {
                "request_id": outcome.record.request_id,
                "status": outcome.record.status,
                "code": outcome.code,
                "message": outcome.message,
            },
            status_code=outcome.status,
        )
