"""Builds the router's dependencies from its settings, once per process (at
Lambda init in the cloud, at start locally)."""

from __future__ import annotations

from pathlib import Path

from switchyard.admission import (
    Admission,
    DynamoDBQueuedCounts,
    DynamoDBSlotStore,
    Kind,
    QueuedWork,
)
from switchyard.artifacts import fetch_artifact
from switchyard.auth import KeyIdDirectory
from switchyard.budgets import Budgets, BudgetState, DynamoDBBudgetStore
from switchyard.callbacks import JobEvents
from switchyard.engines import EngineBoard
from switchyard.generation import DynamoDBTokenStream, PromptTokens
from switchyard.idempotency import DynamoDBKeyStore, IdempotencyKeys
from switchyard.jobs import JobStore
from switchyard.routing import routing_for
from switchyard.settings import RouterSettings
from switchyard.telemetry import PERCENT, emit_metrics
from switchyard.wiring import build_adapters
from switchyard_router.app import RouterDeps
from switchyard_router.generate_api import MAX_STREAM_SECONDS
from switchyard_router.jobs_api import JobsApi
from switchyard_router.logic import MAX_DEADLINE_MS, PredictService
from switchyard_router.streaming import StreamHub

# The longest a request holds its tenant's slot: a sync request until its deadline,
# a stream until its first token's deadline and then its whole length. A router that
# dies holding one leaks it this long at most, then the next request reclaims it.
SLOT_LEASE_SECONDS: dict[Kind, float] = {
    "sync_requests": MAX_DEADLINE_MS / 1000 + 2,
    "streams": MAX_DEADLINE_MS / 1000 + MAX_STREAM_SECONDS + 2,
}


def build_deps(settings: RouterSettings) -> RouterDeps:
    adapters = build_adapters(settings)
    routing = routing_for(settings)
    s3 = adapters.client("s3")
    tokenizers = Path(settings.tokenizer_cache)
    keys = IdempotencyKeys(DynamoDBKeyStore(adapters.client("dynamodb"), settings.results_table))
    budgets = None
    if settings.tenant_budgets:
        budgets = Budgets(
            DynamoDBBudgetStore(adapters.client("dynamodb"), settings.results_table),
            settings.tenant_budgets,
            on_state=file_budget_used,
        )
    service = PredictService(
        endpoints=adapters.queues,
        registry=adapters.registry,
        results=adapters.results,
        cache=adapters.cache,
        payloads=adapters.payloads,
        routing=routing,
        result_ttl_seconds=settings.result_ttl_seconds,
        claim_check_bytes=settings.claim_check_bytes,
        max_age_seconds=settings.max_age_seconds,
        sync_grace_seconds=settings.sync_grace_seconds,
        prompt_tokens=PromptTokens(lambda uri, sha: fetch_artifact(s3, uri, sha, tokenizers)),
        admission=Admission(
            DynamoDBSlotStore(adapters.client("dynamodb"), settings.results_table),
            {
                tenant: {"streams": limits.streams, "sync_requests": limits.sync_requests}
                for tenant, limits in settings.tenant_limits.items()
            },
            SLOT_LEASE_SECONDS,
            settings.busy_retry_after_seconds,
        ),
        queued_work=QueuedWork(
            DynamoDBQueuedCounts(adapters.client("dynamodb"), settings.results_table),
            {
                tenant: limits.queued
                for tenant, limits in settings.tenant_limits.items()
                if limits.queued is not None
            },
            settings.busy_retry_after_seconds,
        ),
        budgets=budgets,
        idempotency=keys,
    )
    jobs = None
    if settings.jobs_table and settings.batch_drop_bucket:
        jobs = JobsApi(
            store=JobStore(adapters.client("dynamodb"), settings.jobs_table),
            s3=adapters.client("s3"),
            registry=adapters.registry,
            models=list(adapters.queues),
            drop_bucket=settings.batch_drop_bucket,
            ttl_seconds=settings.result_ttl_seconds,
            routing=routing,
            budgets=budgets,
            keys=keys,
            events=JobEvents.on_queue(adapters.client("sqs"), settings.drop_queue_url)
            if settings.drop_queue_url
            else None,
        )
    stream = DynamoDBTokenStream(adapters.client("dynamodb"), settings.results_table)
    return RouterDeps(
        service=service,
        tenants=KeyIdDirectory(settings.tenant_keys),
        max_body_bytes=settings.max_body_bytes,
        jobs=jobs,
        stream=stream,
        results=adapters.results,
        hub=StreamHub(stream),
        engines=EngineBoard(adapters.client("dynamodb"), settings.results_table),
    )


def file_budget_used(state: BudgetState) -> None:
    """The share of its month's budget a tenant has spent, in percent, as the metric
    its 80 % alarm watches (``TenantBudgetUsed``, dimension ``tenant``)."""
    if state.used is not None:  # a budget of 0 is used up from the start
        used = 100.0 * state.used if state.used != float("inf") else 100.0
        emit_metrics({"TenantBudgetUsed": (PERCENT, used)}, tenant=state.tenant)
