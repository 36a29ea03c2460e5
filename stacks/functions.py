"""The platform's Lambda functions: shared code, a least-privilege function shape,
and the environment contract of ``switchyard.settings``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.assets import CORE_LAYER, ROUTER, SPLITTER
from stacks.bundling import python_code
from stacks.cloud import (
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    LOG_RETENTION,
    METRICS_NAMESPACE,
    Deployment,
)
from stacks.data import Storage
from stacks.nag import acknowledge
from switchyard.settings import Settings, to_environment


class FunctionCode(Construct):
    """Code the functions share: the core layer, the AppConfig extension layer, and
    one router bundle that every model's router function runs."""

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
        self.router = python_code(ROUTER)
        self.splitter = python_code(SPLITTER)


class PlatformFunction(Construct):
    """A Python function with its own role and log group, and nothing else.

    The role starts empty (no managed policy): the caller grants exactly the
    tables, queues and buckets this function touches.
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
            handler="handler.handler",
            code=code,
            description=description,
            role=self.role,
            log_group=self.log_group,
            layers=layers,
            environment=dict(environment),
            timeout=timeout,
            memory_size=memory_size,
            tracing=lambda_.Tracing.ACTIVE,
        )
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
