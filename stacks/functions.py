"""The platform's Lambda functions: shared code, a least-privilege function shape,
and the environment contract of ``switchyard.settings``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.assets import CORE_LAYER, KEY_AUTHORIZER, ROUTER, SPLITTER
from stacks.bundling import python_code
from stacks.cloud import (
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    LOG_RETENTION,
    METRICS_NAMESPACE,
    ROUTER_TIMEOUT,
    STREAMING_ROUTER_TIMEOUT,
    WEB_ADAPTER_ENVIRONMENT,
    WEB_ADAPTER_HANDLER,
    Deployment,
)
from stacks.data import Storage
from stacks.nag import acknowledge
from switchyard.settings import Settings, to_environment


@dataclass(frozen=True)
class RouterServing:
    """How a function runs the router app.

    Buffered: Mangum's handler answers each event whole, within API Gateway's 29 s.
    Streamed: the Lambda Web Adapter starts uvicorn on the same app (``run.sh``) and
    streams its response; API Gateway must then invoke the function with
    InvokeWithResponseStream (a STREAM integration) on every method it serves, since
    a streamed response is not the JSON a buffered proxy integration expects.
    """

    stream: bool
    handler: str
    timeout: Duration
    environment: Mapping[str, str]
    layers: tuple[lambda_.ILayerVersion, ...]


class FunctionCode(Construct):
    """Code the functions share: the core layer, the AppConfig extension and Lambda
    Web Adapter layers, one router bundle that every router function runs, and the
    splitter's and the key authorizer's code."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        self.core_layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=python_code(CORE_LAYER),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[LAMBDA_ARCHITECTURE],
            description="Switchyard core: schemas, registry, results, routing, settings",
        )
        self.appconfig_extension = lambda_.LayerVersion.from_layer_version_arn(
            self, "AppConfigExtension", deployment.appconfig_extension_arn(self)
        )
        self.web_adapter = lambda_.LayerVersion.from_layer_version_arn(
            self, "WebAdapter", deployment.web_adapter_arn()
        )
        self.router = python_code(ROUTER)
        self.splitter = python_code(SPLITTER)
        self.key_authorizer = python_code(KEY_AUTHORIZER)

    def router_serving(self, *, stream: bool) -> RouterServing:
        """Buffered through Mangum, or streamed through the Lambda Web Adapter."""
        if not stream:
            return RouterServing(False, "handler.handler", ROUTER_TIMEOUT, {}, ())
        return RouterServing(
            True,
            WEB_ADAPTER_HANDLER,
            STREAMING_ROUTER_TIMEOUT,
            WEB_ADAPTER_ENVIRONMENT,
            (self.web_adapter,),
        )


class PlatformFunction(Construct):
    """A Python function with its own role and log group, and nothing else.

    The role starts empty (no managed policy): the caller grants exactly the
    tables, queues and buckets this function touches. ``tracing`` adds X-Ray (and
    its grant); a function that calls nothing (the key authorizer) goes without.
    ``reserved_concurrency``: its function family's reservation (the stage's
    ``concurrency``), so no family, and no tenant through it, takes another's.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        code: lambda_.Code,
        description: str,
        environment: Mapping[str, str],
        layers: list[lambda_.ILayerVersion],
        timeout: Duration,
        memory_size: int,
        handler: str = "handler.handler",
        tracing: bool = True,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=description,
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=deployment.removal_policy
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=LAMBDA_RUNTIME,
            architecture=LAMBDA_ARCHITECTURE,
            handler=handler,
            code=code,
            description=description,
            role=self.role,
            log_group=self.log_group,
            layers=layers,
            environment=dict(environment),
            timeout=timeout,
            memory_size=memory_size,
            tracing=lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED,
            # Its family's share of the account's concurrency (the manifest's
            # [stages.<stage>.concurrency]): a ceiling, and a floor kept for it.
            reserved_concurrent_executions=reserved_concurrency,
        )
        if tracing:
            acknowledge(
                self.role,
                "AwsSolutions-IAM5[Resource::*]",
                "X-Ray's PutTraceSegments and PutTelemetryRecords take no resource; "
                "Powertools Tracer needs them to trace each request through the platform.",
            )


def settings_environment(
    scope: Construct,
    kind: type[Settings],
    *,
    deployment: Deployment,
    storage: Storage,
    queues: Mapping[str, Mapping[str, str]],
    service: str,
    **values: Any,
) -> dict[str, str]:
    """The ``SWITCHYARD_*`` variables of one deployable (``switchyard.settings``),
    rendered by the same function the local platform uses, plus Powertools'."""
    common = {
        **deployment.manifest.settings_values(deployment.stage),
        "region": Stack.of(scope).region,
        "registry_table": storage.registry_table.table_name,
        "results_table": storage.results_table.table_name,
        "payloads_bucket": storage.payloads_bucket.bucket_name,
        "queues": queues,
    }
    return {
        **to_environment(kind, {**common, **values}, dumps=Stack.of(scope).to_json_string),
        "POWERTOOLS_SERVICE_NAME": service,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
    }
