"""The platform's Lambda functions: shared code, a least-privilege function shape,
and the environment contract of ``switchyard.settings``."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.bundling import python_code
from stacks.cloud import (
    CORE_LAYER_DIR,
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    LOG_RETENTION,
    METRICS_NAMESPACE,
    ROUTER_DIR,
    SPLITTER_DIR,
    Deployment,
)
from stacks.data import Storage
from stacks.nag import acknowledge


class FunctionCode(Construct):
    """Code the functions share: the core layer, the AppConfig extension layer, and
    one router bundle that every model's router function runs."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        core_requirements = CORE_LAYER_DIR / "requirements.txt"
        self.core_layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=python_code(CORE_LAYER_DIR / "python", core_requirements, prefix="python"),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[LAMBDA_ARCHITECTURE],
            description="Switchyard core: schemas, registry, results, routing, settings",
        )
        self.appconfig_extension = lambda_.LayerVersion.from_layer_version_arn(
            self, "AppConfigExtension", deployment.appconfig_extension_arn(self)
        )
        # The router's pins are constrained by the core's, so both agree on pydantic.
        self.router = python_code(ROUTER_DIR, ROUTER_DIR / "requirements.txt", core_requirements)
        self.splitter = python_code(
            SPLITTER_DIR, SPLITTER_DIR / "requirements.txt", core_requirements
        )


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

    def grant_api_key_lookup(self) -> None:
        """The router maps x-api-key to a tenant via API Gateway's key store (tags)."""
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["apigateway:GET"],
                resources=[f"arn:{Aws.PARTITION}:apigateway:{Aws.REGION}::/apikeys"],
            )
        )


def settings_environment(
    scope: Construct,
    *,
    deployment: Deployment,
    storage: Storage,
    queues: Mapping[str, Mapping[str, str]],
    service: str,
) -> dict[str, str]:
    """The ``SWITCHYARD_*`` variables every process reads (``switchyard.settings``)."""
    platform = deployment.manifest.platform
    return {
        "SWITCHYARD_STAGE": deployment.stage,
        "SWITCHYARD_REGION": Stack.of(scope).region,
        "SWITCHYARD_REGISTRY_TABLE": storage.registry_table.table_name,
        "SWITCHYARD_RESULTS_TABLE": storage.results_table.table_name,
        "SWITCHYARD_PAYLOADS_BUCKET": storage.payloads_bucket.bucket_name,
        "SWITCHYARD_QUEUES": Stack.of(scope).to_json_string(queues),
        "SWITCHYARD_RESULT_TTL_SECONDS": str(platform.result_ttl_seconds),
        "SWITCHYARD_CLAIM_CHECK_BYTES": str(platform.claim_check_bytes),
        "SWITCHYARD_RESULT_INLINE_BYTES": str(platform.result_inline_bytes),
        "SWITCHYARD_MAX_BODY_BYTES": str(platform.max_body_bytes),
        "SWITCHYARD_VISIBILITY_TIMEOUT_SECONDS": str(platform.visibility_timeout_seconds),
        "POWERTOOLS_SERVICE_NAME": service,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
    }
