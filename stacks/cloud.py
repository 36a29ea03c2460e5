"""Cloud-only settings: what the manifest leaves to the AWS substrate.

``manifest.toml`` holds what both substrates share (models, tenants, tiers, stage
switches) and ``ResourceNames`` names every shared resource. What only the cloud
needs (runtimes, timeouts, alarm thresholds, instance sizing, the bucket-name
suffix) is decided here, once, so the constructs carry no literals of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.assets import CORE_LAYER_DIR
from switchyard.costs import ROUTER_MEMORY_MB as ROUTER_MEMORY_MB  # the routers' memory
from switchyard.manifest import Manifest, ResourceNames, Stage, StageSettings
from switchyard.scaling import ScalingPolicy

# One schema for the router, the local platform and AppConfig's validator.
ROUTING_SCHEMA_FILE = CORE_LAYER_DIR / "python" / "switchyard" / "routing_schema.json"

# The EMF namespace the router and workers write to (dimensions: model, version).
METRICS_NAMESPACE = "Switchyard"

# --- Lambda -------------------------------------------------------------------
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_14
LAMBDA_ARCHITECTURE = lambda_.Architecture.X86_64
# pip selects wheels for the runtime above (stacks.assets.LAMBDA_TARGET, kept beside
# it by a test); no Docker, no compiler.
# API Gateway's REST integration limit; the router must answer (200 or 202) first.
API_INTEGRATION_TIMEOUT = Duration.seconds(29)
ROUTER_TIMEOUT = Duration.seconds(28)
SPLITTER_MEMORY_MB = 1024
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# The AppConfig agent extension (x86_64), per region; pinned so deploys are repeatable.
# Override with `-c appconfig_extension_arn=...` for a region not listed here.
APPCONFIG_EXTENSION_LAYER = {
    "us-east-1": "arn:aws:lambda:us-east-1:027255383542:layer:AWS-AppConfig-Extension:321",
    "us-east-2": "arn:aws:lambda:us-east-2:728743619870:layer:AWS-AppConfig-Extension:277",
    "us-west-2": "arn:aws:lambda:us-west-2:359756378197:layer:AWS-AppConfig-Extension:373",
    "eu-west-1": "arn:aws:lambda:eu-west-1:434848589818:layer:AWS-AppConfig-Extension:303",
    "eu-central-1": "arn:aws:lambda:eu-central-1:066940009817:layer:AWS-AppConfig-Extension:295",
}
# How often the extension asks AppConfig for a new routing document.
APPCONFIG_POLL_SECONDS = 15

# --- Streaming: generation and the OpenAI-compatible API --------------------------
# Python on Lambda has no response streaming of its own, so the functions that stream
# (a generation model's router, the OpenAI-compatible API) run the router app under
# uvicorn behind the AWS Lambda Web Adapter, which streams what the app writes back
# through Lambda's streaming response (docs/deploying.md, "Generation and streaming").
# Its public layer, pinned (account and version) so deploys are repeatable; the
# layer's name follows the functions' architecture.
WEB_ADAPTER_LAYER = "arn:aws:lambda:{region}:753240598075:layer:{name}:25"
WEB_ADAPTER_LAYER_NAME = {
    lambda_.Architecture.X86_64.name: "LambdaAdapterLayerX86",
    lambda_.Architecture.ARM_64.name: "LambdaAdapterLayerArm64",
}[LAMBDA_ARCHITECTURE.name]
# The adapter runs the function's handler as a program (functions/router/run.sh,
# which execs uvicorn on the router app), waits until the app answers its readiness
# path, and forwards each event to it as an HTTP request on this port.
WEB_ADAPTER_HANDLER = "run.sh"
WEB_ADAPTER_ENVIRONMENT = {
    "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
    "AWS_LWA_INVOKE_MODE": "response_stream",
    "PORT": "8080",
    "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
}
# API Gateway streams a REST integration's response for up to 15 minutes (the
# integration timeout may then go past 29 s), and closes a stream idle for 5 minutes
# (Regional endpoint). A streaming router ends its response before the integration
# gives up, as a buffered one answers before 29 s.
STREAM_INTEGRATION_TIMEOUT = Duration.minutes(15)
STREAMING_ROUTER_TIMEOUT = Duration.minutes(14)

# --- The key authorizer -------------------------------------------------------------
# A few lines of standard library per request (no results cache: see stacks/api.py).
AUTHORIZER_TIMEOUT = Duration.seconds(5)
AUTHORIZER_MEMORY_MB = 256

# --- AppConfig rollouts (prod; dev deploys all at once) ---------------------------
CONFIG_LINEAR_STEP_PERCENT = 20.0
CONFIG_LINEAR_DURATION = Duration.minutes(10)

# --- ECS workers ------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSize:
    """What one worker task reserves on its instance (bridge networking, EC2)."""

    cpu: int
    memory_mib: int
    gpus: int


# g5/g6.xlarge: 4 vCPU, 16 GiB, 1 GPU; c7i.xlarge: 4 vCPU, 8 GiB. Leave the agent room.
TASK_SIZE = {
    "gpu": TaskSize(cpu=3072, memory_mib=12_288, gpus=1),
    "cpu": TaskSize(cpu=3072, memory_mib=6_144, gpus=0),
}
ROOT_VOLUME_GIB = 100  # the worker image carries CUDA torch and vLLM
# ECS's upper bound: a stopping worker finishes and records its in-flight batch.
WORKER_STOP_TIMEOUT = Duration.seconds(120)
WORKER_READY_FILE = "/tmp/switchyard-worker.ready"
WORKER_START_PERIOD = Duration.minutes(5)  # model download and load before health counts

# --- Scaling on queue depth -------------------------------------------------------
# The numbers are the manifest's (Manifest.scaling_policy); the cloud only adds the
# period its alarms read SQS and Container Insights metrics at, their finest.
SCALING_PERIOD = Duration.minutes(1)
# A pool scales on the sum of its models' queues, more than the ten metrics an alarm
# may read: a meter (stacks/pools.py) reads every queue's counts each SCALING_PERIOD
# and publishes them as one metric per count under the pool's dimension, each queue
# one value of it, so the metric's Average times the pool's queue count is the sum.
POOL_DIMENSION = "pool"
POOL_QUEUED_METRIC = "PoolQueuedMessages"  # visible, both lanes of every model
POOL_IN_FLIGHT_METRIC = "PoolInFlightMessages"  # received and not yet deleted
# PutMetricData takes at most 150 values in one datum: the meter reads and publishes
# a pool's queues this many at a time.
POOL_METER_VALUES_PER_DATUM = 150

# --- Alarms -----------------------------------------------------------------------
ALARM_PERIOD = Duration.minutes(1)
# A cold GPU instance takes minutes to join; older realtime work means scaling lags.
REALTIME_AGE_ALARM = Duration.minutes(5)
BATCH_AGE_ALARM = Duration.hours(1)


@dataclass(frozen=True)
class Deployment:
    """One stage of the platform: the manifest plus that stage's switches."""

    manifest: Manifest
    stage: Stage

    @property
    def names(self) -> ResourceNames:
        return self.manifest.names(self.stage)

    @property
    def settings(self) -> StageSettings:
        return self.manifest.stages[self.stage]

    @property
    def is_prod(self) -> bool:
        return self.stage == "prod"

    @staticmethod
    def bucket_name(name: str) -> str:
        """S3 names are global: the manifest's name plus account and region."""
        return ResourceNames.cloud_bucket(name, Aws.ACCOUNT_ID, Aws.REGION)

    @staticmethod
    def bucket_objects_arn(name: str) -> str:
        """Every object of the bucket named ``name`` in the manifest."""
        return f"arn:{Aws.PARTITION}:s3:::{Deployment.bucket_name(name)}/*"

    @staticmethod
    def bucket_objects_finding(name: str) -> str:
        """How cdk-nag writes :meth:`bucket_objects_arn` in an IAM5 finding."""
        return f"arn:<AWS::Partition>:s3:::{name}-<AWS::AccountId>-<AWS::Region>/*"

    @property
    def removal_policy(self) -> RemovalPolicy:
        """Prod keeps tables and buckets when a stack goes; dev cleans up."""
        return RemovalPolicy.RETAIN if self.is_prod else RemovalPolicy.DESTROY

    def scaling_policy(self, model: str) -> ScalingPolicy:
        return self.manifest.scaling_policy(model, self.stage)

    def pool_scaling_policy(self, pool: str) -> ScalingPolicy:
        return self.manifest.pool_scaling_policy(pool, self.stage)

    @property
    def nat_gateways(self) -> int:
        """A stage whose workers need not be private (dev, which scales to zero)
        pays nothing for NAT while idle: its workers sit in public subnets with no
        inbound rule. Prod keeps them private."""
        return 2 if self.settings.private_workers else 0

    def web_adapter_arn(self) -> str:
        """The Lambda Web Adapter layer in the manifest's region."""
        return WEB_ADAPTER_LAYER.format(
            region=self.manifest.platform.region, name=WEB_ADAPTER_LAYER_NAME
        )

    def appconfig_extension_arn(self, scope: Construct) -> str:
        override = scope.node.try_get_context("appconfig_extension_arn")
        if override:
            return str(override)
        region = self.manifest.platform.region
        if region not in APPCONFIG_EXTENSION_LAYER:
            raise ValueError(
                f"no AppConfig extension layer known for {region}; "
                "pass -c appconfig_extension_arn=<arn> (see docs/deploying.md)"
            )
        return APPCONFIG_EXTENSION_LAYER[region]


def deployment_from_context(scope: Construct, manifest: Manifest) -> Deployment:
    """The stage named by `-c stage=...` (default dev), checked against the manifest."""
    stage = scope.node.try_get_context("stage") or "dev"
    if stage not in manifest.stages:
        raise ValueError(f"-c stage={stage!r}: the manifest defines {sorted(manifest.stages)}")
    return Deployment(manifest=manifest, stage=stage)
