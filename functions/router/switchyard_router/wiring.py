"""Builds the router's dependencies from the settings, once per process."""

from __future__ import annotations

from switchyard import aws
from switchyard.auth import ApiGatewayKeyDirectory
from switchyard.payloads import S3PayloadStore
from switchyard.queues import SqsWorkQueue
from switchyard.registry import DynamoDBRegistry
from switchyard.results import DynamoDBResultStore
from switchyard.routing import CachedRouting, appconfig_extension_fetcher
from switchyard.settings import Settings, get_settings
from switchyard_router.app import RouterDeps
from switchyard_router.logic import ModelEndpoint, PredictService


def build_deps(settings: Settings | None = None) -> RouterDeps:
    s = settings or get_settings()

    def client(service: str):  # noqa: ANN202
        return aws.client(service, s.region, s.aws_endpoint_url)

    payloads = S3PayloadStore(client("s3"), s.payloads_bucket)
    sqs = client("sqs")
    routing = None
    if s.routing_source == "appconfig-extension":
        fetch = appconfig_extension_fetcher(s.appconfig_application, s.appconfig_environment)
        routing = CachedRouting(fetch, s.routing_cache_seconds)
    elif s.routing_source == "hosted-versions":
        from switchyard_local.bridge import hosted_version_fetcher

        fetch = hosted_version_fetcher(client("appconfig"), s.appconfig_application)
        routing = CachedRouting(fetch, s.routing_cache_seconds)
    service = PredictService(
        endpoints={
            model: ModelEndpoint(
                realtime=SqsWorkQueue(sqs, pair.realtime, "realtime"),
                batch=SqsWorkQueue(sqs, pair.batch, "batch"),
            )
            for model, pair in s.queues.items()
        },
        registry=DynamoDBRegistry(client("dynamodb"), s.registry_table),
        results=DynamoDBResultStore(
            client("dynamodb"), s.results_table, payloads, s.result_inline_bytes
        ),
        payloads=payloads,
        routing=routing,
        result_ttl_seconds=s.result_ttl_seconds,
        claim_check_bytes=s.claim_check_bytes,
    )
    return RouterDeps(
        service=service,
        tenants=ApiGatewayKeyDirectory(client("apigateway"), s.api_key_cache_seconds),
        max_body_bytes=s.max_body_bytes,
    )
