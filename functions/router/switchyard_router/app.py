"""The router: one FastAPI app, served by Mangum in Lambda and by uvicorn locally.

Routes validate their body with its model (``switchyard.bodies``), delegate to
``PredictService`` and format the ``Outcome`` it answers with; every client mistake
is answered with a status code, a message and the field at fault, and nothing is
enqueued for a rejected request.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from switchyard.admission import AtCapacity
from switchyard.auth import verified_key_id
from switchyard.bodies import GenerateBody, JobSubmission, PredictBody
from switchyard.budgets import OverBudget
from switchyard.fields import FieldError, field_path
from switchyard.idempotency import KeyReused
from switchyard.jobs import JOB_ID_PATTERN, job_view
from switchyard.schemas import FORBIDDEN, ResultRecord
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
from switchyard_router.bodies import Refusal, json_object, read_body, read_model
from switchyard_router.deps import RouterDeps
from switchyard_router.generate_api import GenerationCall, NativeFormat, generate
from switchyard_router.idempotent import IdempotencyHeader, idempotent
from switchyard_router.jobs_api import JobsApi
from switchyard_router.logic import Idempotent, PredictService, RequestRejected
from switchyard_router.oip import add_protocol_routes, is_protocol_path
from switchyard_router.oip import error_response as protocol_error
from switchyard_router.openai_api import add_openai_routes, is_openai_path
from switchyard_router.openai_api import error_body as openai_error
from switchyard_router.outcome import Admitted, Outcome

log = logging.getLogger("switchyard.router")

# How a body its model refuses is answered, per route.
PREDICT_REFUSAL = Refusal(422, "invalid_input", "the body is not a valid predict request")
JOB_REFUSAL = Refusal(422, "invalid_request", "the job is not valid")

# The parameters every route that admits a request takes.
AsyncQuery = Annotated[bool, Query(alias="async")]
StickyHeader = Annotated[
    str | None,
    Header(
        alias="x-user-id",
        max_length=256,
        description="The default sticky key: the same value keeps its version",
    ),
]
PinHeader = Annotated[
    str | None,
    Header(
        alias="x-model-version",
        min_length=1,
        max_length=64,
        description="Pin the request to this version: no canary assignment, shadow or fallback",
    ),
]


def create_app(deps: RouterDeps) -> FastAPI:
    """The app over its dependencies (``switchyard_router.wiring.build_deps``)."""
    app = FastAPI(
        default_response_class=JSONResponse,
        title="Switchyard",
        version="1.0",
        description="Function-per-model inference. Every call needs an `x-api-key` header.",
    )
    app.router.route_class = api_document.DocumentedLater  # before any route is made

    def tenant_of(request: Request) -> str:
        """The tenant of the API key API Gateway verified (its id is in the request
        context); the router never sees the key's value."""
        key_id = verified_key_id(request.scope.get("aws.event"))
        tenant = deps.tenants.tenant_for(key_id) if key_id else None
        if tenant is None:
            raise RequestRejected(FORBIDDEN.status, FORBIDDEN.code, FORBIDDEN.message)
        return tenant

    @app.exception_handler(RequestRejected)
    async def _rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        if is_openai_path(request.url.path):
            param = exc.errors[0].field if exc.errors else None
            message = exc.message
            if exc.code in ("invalid_input", "invalid_parameter") and exc.errors:
                message = f"{param}: {exc.errors[0].message}"
            # OpenAI answers a request its caller must change with 400, never 422.
            status = 400 if exc.code == KeyReused.code else exc.status
            return openai_error(status, exc.code, message, param)
        return _error(exc.status, exc.code, exc.message, exc.errors)

    @app.exception_handler(AtCapacity)
    @app.exception_handler(OverBudget)
    async def _busy(request: Request, exc: AtCapacity | OverBudget) -> JSONResponse:
        if is_openai_path(request.url.path):
            response = openai_error(429, exc.code, str(exc))
        else:
            response = _error(429, exc.code, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_seconds)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldError(field_path(e["loc"][1:]) or str(e["loc"][0]), e["msg"]) for e in exc.errors()
        ]
        if is_openai_path(request.url.path):
            return openai_error(400, "invalid_parameter", errors[0].message, errors[0].field)
        return _error(422, "invalid_request", "the request is not valid", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if is_openai_path(request.url.path) and exc.status_code == 404:
            # no such route (an unknown model is a 404 of the route that names it)
            where = f"{request.method} {request.url.path}"
            response = openai_error(404, "unknown_url", f"Invalid URL ({where})")
        elif is_openai_path(request.url.path):
            response = openai_error(exc.status_code, "http_error", str(exc.detail))
        elif is_protocol_path(request.url.path):
            response = protocol_error(exc.status_code, f"{request.url.path}: {exc.detail}")
        else:
            response = _error(exc.status_code, "http_error", str(exc.detail))
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            response.headers["Allow"] = _allowed_methods(app, request.scope)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        message = "the platform failed to handle the request"
        if is_openai_path(request.url.path):
            return openai_error(500, "internal_error", message)
        return _error(500, "internal_error", message)

    @app.get("/healthz", tags=["platform"], response_model=None, responses=api_document.HEALTH)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", tags=["models"], response_model=None, responses=api_document.MODELS)
    def list_models(request: Request) -> dict[str, Any]:
        tenant_of(request)
        return {"models": deps.service.catalog()}

    @app.post(
        "/v1/models/{model}/predict",
        tags=["predict"],
        openapi_extra=api_document.request_body(PredictBody),
        responses=api_document.PREDICT,
    )
    async def predict(
        request: Request,
        model: Annotated[str, Path(max_length=64, examples=["digits-cnn", "minilm-embed"])],
        is_async: AsyncQuery = False,
        deadline_ms: DeadlineHeader = None,
        user_id: StickyHeader = None,
        pinned: PinHeader = None,
        idempotency_key: IdempotencyHeader = None,
    ) -> JSONResponse:
        tenant = tenant_of(request)
        body = await read_model(request, deps.max_body_bytes, PredictBody, PREDICT_REFUSAL)
        version = body.params.version if body.params else None
        if pinned and version and pinned != version:
            raise RequestRejected(
                422,
                "invalid_input",
                f"x-model-version {pinned!r} and params.version {version!r} differ",
                [FieldError("params.version", "differs from the x-model-version header")],
            )
        return await run_in_threadpool(
            _predict_sync,
            deps.service,
            model,
            tenant,
            body.inputs,
            dict(request.headers),
            deadline_ms,
            is_async,
            base_path(request),
            pinned or version,
            idempotent(idempotency_key, f"predict {model} {pinned or ''}", body),
        )

    @app.get(
        "/v1/requests/{request_id}",
        tags=["predict"],
        response_model=None,
        responses=api_document.REQUEST_STATUS,
    )
    def get_request(request: Request, request_id: Annotated[str, Path(max_length=64)]) -> Any:
        tenant = tenant_of(request)
        record = deps.service.status(tenant, request_id)
        if record is None:
            raise RequestRejected(404, "unknown_request", f"request {request_id} does not exist")
        return _status_body(record)

    @app.delete(
        "/v1/requests/{request_id}",
        tags=["predict"],
        response_model=None,
        responses=api_document.CANCEL,
    )
    def cancel_request(request: Request, request_id: Annotated[str, Path(max_length=64)]) -> Any:
        """Cancel a request that has not run yet. A finished one keeps its result
        (409, with its status)."""
        tenant = tenant_of(request)
        record = deps.service.cancel(tenant, request_id)
        if record is None:
            raise RequestRejected(404, "unknown_request", f"request {request_id} does not exist")
        if record.status != "cancelled":
            return JSONResponse(
                {
                    **_status_body(record),
                    "code": "already_finished",
                    "message": f"request {request_id} already ended: {record.status}",
                },
                status_code=409,
            )
        return _status_body(record)

    @app.post(
        "/v1/models/{model}/generate",
        tags=["generate"],
        response_model=None,
        openapi_extra=api_document.request_body(GenerateBody),
        responses=api_document.GENERATE,
    )
    async def generate_route(
        request: Request,
        model: Annotated[str, Path(max_length=64, examples=["pydoc-gpt"])],
        is_async: AsyncQuery = False,
        deadline_ms: DeadlineHeader = None,
        user_id: StickyHeader = None,
        pinned: PinHeader = None,
        idempotency_key: IdempotencyHeader = None,
    ) -> Any:
        """Generate text: ``{"prompt", "max_tokens", "temperature", "top_p", "seed",
        "stop", "stream"}``. Streamed, the answer is server-sent events, one
        ``data: {"token": ...}`` per token and a last ``data: {"done": true, ...}``
        with ``finish_reason`` and ``usage``; otherwise one JSON answer. With
        ``?async=true`` the answer is its record, streamed or not."""
        tenant = tenant_of(request)
        body = json_object(await read_body(request, deps.max_body_bytes))
        call = GenerationCall(
            model=model,
            tenant=tenant,
            request=body,
            headers=dict(request.headers),
            deadline_ms=deadline_ms,
            is_async=is_async,
            pinned=pinned,
            base_path=base_path(request),
            idempotent=idempotent(idempotency_key, f"generate {model} {pinned or ''}", body),
        )
        return await run_in_threadpool(
            generate, deps.service, deps.stream, deps.results, call, NativeFormat(), deps.hub
        )

    add_openai_routes(app, deps, tenant_of)
    add_protocol_routes(app, deps, tenant_of)
    if deps.jobs is not None:
        _job_routes(app, deps.jobs, tenant_of, deps.max_body_bytes)
    api_document.finish(
        app, lambda: {m: deps.service.active_versions(m) for m in deps.service.models}
    )
    return app


def _job_routes(app: FastAPI, jobs: JobsApi, tenant_of: Any, max_body_bytes: int) -> None:
    @app.post(
        "/v1/jobs",
        tags=["jobs"],
        status_code=202,
        response_model=None,
        responses=api_document.JOB_SUBMIT,
        openapi_extra=api_document.request_body(JobSubmission),
    )
    async def submit_job(request: Request, idempotency_key: IdempotencyHeader = None) -> Any:
        """A batch job: ``inputs`` (one output line each) or ``input_uri``, a JSON
        Lines file in the drop bucket under the caller's prefix. The same file again
        is the same job (200)."""
        tenant = tenant_of(request)
        submission = await read_model(request, max_body_bytes, JobSubmission, JOB_REFUSAL)
        keyed = idempotent(idempotency_key, "jobs", submission)
        job, new, replayed = await run_in_threadpool(jobs.submit, tenant, submission, keyed)
        body = job_view(job, base_path(request))
        headers = {"Location": body["location"]}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        return JSONResponse(body, status_code=202 if new else 200, headers=headers)

    @app.get("/v1/jobs", tags=["jobs"], response_model=None, responses=api_document.JOB_LIST)
    def list_jobs(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        # a job id, as the page before gave it in ``next``
        after: Annotated[str | None, Query(pattern=f"^{JOB_ID_PATTERN}$")] = None,
    ) -> Any:
        """The caller's jobs, newest first; ``next`` is the ``after`` of the next page."""
        tenant = tenant_of(request)
        page, following = jobs.store.list(tenant, limit, after)
        base = base_path(request)
        return {"jobs": [job_view(j, base) for j in page], "next": following}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], response_model=None, responses=api_document.JOB)
    def get_job(request: Request, job_id: Annotated[str, Path(max_length=64)]) -> Any:
        return job_view(jobs.get(tenant_of(request), job_id), base_path(request))

    @app.delete(
        "/v1/jobs/{job_id}", tags=["jobs"], response_model=None, responses=api_document.JOB_CANCEL
    )
    def cancel_job(request: Request, job_id: Annotated[str, Path(max_length=64)]) -> Any:
        """Cancel a job that has not ended: chunks not yet run are answered as
        cancelled and no output is written. An ended job stays as it is (409)."""
        job = jobs.cancel(tenant_of(request), job_id)
        body = job_view(job, base_path(request))
        if job.status != "cancelled":
            return JSONResponse(
                {**body, "code": "already_finished", "message": f"job {job_id} already ended"},
                status_code=409,
            )
        return body


def _allowed_methods(app: FastAPI, scope: Scope) -> str:
    """Every method the request's path takes, over all the routes that share it
    (a route alone knows only its own)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def _predict_sync(
    service: PredictService,
    model: str,
    tenant: str,
    inputs: Any,
    headers: dict[str, str],
    deadline_ms: int | None,
    is_async: bool,
    base: str = "",
    pinned: str | None = None,
    keyed: Idempotent | None = None,
) -> JSONResponse:
    def submit() -> Admitted:
        return service.submit(
            model=model,
            tenant=tenant,
            inputs=inputs,
            sticky_headers=headers,
            deadline_ms=deadline_ms,
            is_async=is_async,
            pinned=pinned,
            cache_lookup=cache_allowed(headers),
            idempotent=keyed,
        )

    if is_async:
        return queued(service.answer(submit(), wait=False), base)
    with service.hold(tenant, "sync_requests"):
        outcome = service.answer(submit())
    emit_answered(outcome)
    return _prediction(outcome, base)


def _prediction(outcome: Outcome, base: str) -> JSONResponse:
    """A predict's outcome: its outputs (200), queued (202), or why it has none,
    with the outcome's status."""
    if outcome.record is None:
        return queued(outcome, base)
    record = outcome.record
    body = _status_body(record, outcome.admitted.timings)
    body["fallback"] = outcome.fell_back
    headers = {**routed_headers(outcome.admitted), "x-model-version": record.version}
    if outcome.kind != "done":
        body.update(message=outcome.message, code=outcome.code)
    return JSONResponse(body, outcome.status, headers=headers)


def _status_body(
    record: ResultRecord, router_timings: dict[str, float] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "request_id": record.request_id,
        "model": record.model,
        "version": record.version,
        "status": record.status,
    }
    if record.outputs is not None:
        body["outputs"] = record.outputs
    if record.error is not None:
        body["error"] = record.error.model_dump(exclude_none=True)
    body["timings"] = _durations(record, router_timings)
    if record.served_by is not None:
        body["served_by"] = record.served_by
    if record.cost is not None:
        body["cost"] = record.cost.model_dump()
    return body


def _durations(record: ResultRecord, router: dict[str, float] | None) -> dict[str, float]:
    """Milliseconds per stage of the path, from the timestamps each part recorded,
    and the size of the batch the request ran in."""
    t = record.timings
    out = {k: round(v, 3) for k, v in t.items() if k.endswith("_ms") or k == "batch_size"}
    if router:
        out.update({k: round(v, 3) for k, v in router.items() if k.endswith("_ms")})
        enqueued = router.get("enqueued_at")
        if enqueued and "received_at" in t:
            out["queue_wait_ms"] = round((t["received_at"] - enqueued) * 1000, 3)
        if record.completed_at:
            out["pickup_ms"] = round((time.time() - record.completed_at) * 1000, 3)
        out["total_ms"] = round((time.time() - router["received_at"]) * 1000, 3)
    return out


def _error(
    status: int, code: str, message: str, errors: list[FieldError] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"message": message, "code": code}
    if errors:
        body["errors"] = [{"field": e.field, "message": e.message} for e in errors]
    return JSONResponse(body, status_code=status)
