"""Provisions the emulator from the manifest with the names the CDK app uses:
buckets, tables, queues with their DLQs, API keys and usage plans, AppConfig
profiles with a first routing document, and the demo models in the registry.

Each resource is found before it is made, as a deployment updates a stack: over the
state the emulator kept from the last run (``switchyard_local.emulator_state``) it
makes only what the manifest added, keeps the tenants' keys, and leaves the routing
documents and registered versions as they were left."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from switchyard import aws, tables
from switchyard.artifacts import publish_artifact
from switchyard.auth import TENANT_TAG
from switchyard.manifest import DROP_SUFFIX, Manifest, ResourceNames
from switchyard.registry import ModelVersion, VersionExists
from switchyard.routing import RoutingDocument
from switchyard.schemas import LANES
from switchyard.settings import Settings
from switchyard.wiring import build_adapters
from switchyard_local.models import TOKENIZER_NAME, built_artifact, is_demo
from switchyard_local.routing_changes import describe


@dataclass
class Provisioned:
    """What the local processes need to find the provisioned resources."""

    manifest: Manifest
    stage: str
    region: str
    endpoint_url: str
    names: ResourceNames
    queues: dict[str, dict[str, str]] = field(default_factory=dict)
    dlqs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Tenant -> its API key's value (what a caller sends) and its id (what the
    # router is told by API Gateway).
    api_keys: dict[str, str] = field(default_factory=dict)
    api_key_ids: dict[str, str] = field(default_factory=dict)
    appconfig_application_id: str = ""
    # The drop bucket's notifications, which the splitter consumes.
    drop_queue: str = ""
    drop_dlq: str = ""

    def settings_values(self) -> dict[str, Any]:
        """The settings every process of the local platform shares
        (``switchyard.settings.Settings``): the manifest's numbers and where the
        emulator keeps each resource."""
        return {
            **self.manifest.settings_values(self.stage),
            "region": self.region,
            "aws_endpoint_url": self.endpoint_url,
            "registry_table": self.names.registry_table,
            "results_table": self.names.results_table,
            "payloads_bucket": self.names.payloads_bucket,
            "queues": self.queues,
        }

    def resource_names(self) -> dict[str, str]:
        """The names the CLI needs beside the settings (``platform.json``'s
        ``names``): where artifacts, drops, logs and jobs are kept."""
        return {
            "artifacts_bucket": self.names.artifacts_bucket,
            "batch_drop_bucket": self.names.batch_drop_bucket,
            "prediction_logs_bucket": self.names.prediction_logs_bucket,
            "jobs_table": self.names.jobs_table,
            "drop_queue_url": self.drop_queue,
            "webhook_secret_prefix": self.names.webhook_secret_prefix,
            "appconfig_application_id": self.appconfig_application_id,
        }

    def routing_values(self, appconfig_extension_url: str | None) -> dict[str, Any]:
        """Where a router or the splitter reads routing documents: the AppConfig
        extension's HTTP API, which ``bridge.ExtensionStandIn`` serves locally (None:
        none is read, and each model's newest active version serves)."""
        if appconfig_extension_url is None:
            return {"routing_source": "none"}
        return {
            "routing_source": "appconfig-extension",
            "appconfig_extension_url": appconfig_extension_url,
            "appconfig_application": self.appconfig_application_id,
            "appconfig_environment": self.stage,
        }

    def router_values(self, appconfig_extension_url: str | None) -> dict[str, Any]:
        """The router's settings (no extension's URL: it reads no routing document)."""
        return {
            **self.settings_values(),
            **self.manifest.router_settings_values(),
            **self.routing_values(appconfig_extension_url),
            "tenant_keys": self.api_key_ids,
            "jobs_table": self.names.jobs_table,
            "batch_drop_bucket": self.names.batch_drop_bucket,
            "drop_queue_url": self.drop_queue,
        }

    def splitter_values(self, appconfig_extension_url: str | None) -> dict[str, Any]:
        """The splitter's settings: it reads the routing documents to run each job on
        its model's stable version."""
        return {
            **self.settings_values(),
            **self.routing_values(appconfig_extension_url),
            "jobs_table": self.names.jobs_table,
            "drop_queue_url": self.drop_queue,
            "webhook_secret_prefix": self.names.webhook_secret_prefix,
            "callbacks_to_private_addresses": True,  # the receivers are on loopback
            **self.manifest.budget_values(),
        }

    def worker_values(self, service: str) -> dict[str, Any]:
        """A worker's settings: those of a model's own service (named after the
        model), or of a pool's, which serves its models within its budgets."""
        serves: dict[str, Any] = (
            self.manifest.pool_worker_values(service)
            if service in self.manifest.pools
            else {"worker_model": service}
        )
        return {
            **self.settings_values(),
            **self.manifest.worker_settings_values(),
            **serves,
            "artifacts_bucket": self.names.artifacts_bucket,
            "prediction_log_stream": self.names.prediction_log_stream,
            "jobs_table": self.names.jobs_table,
            "drop_queue_url": self.drop_queue,
            "cost_rates": self.manifest.cost_rates(service).model_dump(),
        }


def provision(
    manifest: Manifest, stage: str, endpoint_url: str, region: str = "us-east-1"
) -> Provisioned:
    """Create every resource of ``stage`` on the emulator at ``endpoint_url``."""

    def clients(service: str) -> Any:
        return aws.client(service, region, endpoint_url)

    names = manifest.names(stage)
    out = Provisioned(manifest, stage, region, endpoint_url, names)
    _buckets(clients("s3"), names)
    _tables(clients("dynamodb"), names)
    sqs = clients("sqs")
    for model in manifest.models:
        out.queues[model], out.dlqs[model] = {}, {}
        for lane in LANES:
            out.dlqs[model][lane], out.queues[model][lane] = _queue_pair(
                sqs,
                manifest,
                names.queue(model, lane),
                names.dlq(model, lane),
                manifest.platform.visibility_timeout_seconds,
            )
    out.drop_dlq, out.drop_queue = _queue_pair(
        sqs,
        manifest,
        names.batch_drop_queue,
        names.batch_drop_dlq,
        manifest.platform.drop_queue_visibility_seconds,
    )
    _drop_notifications(clients("s3"), sqs, names, out.drop_queue)
    _prediction_logs(clients("firehose"), names)
    out.api_keys, out.api_key_ids = _api_keys(clients("apigateway"), manifest, names)
    _webhook_secrets(clients("secretsmanager"), manifest, names)
    out.appconfig_application_id = _routing(clients("appconfig"), manifest, names)
    return out


def _made(create: Any, *exists: str, **request: Any) -> bool:
    """Call ``create(**request)``; False where the resource is there already (the
    error codes in ``exists``)."""
    try:
        create(**request)
    except ClientError as error:
        if error.response["Error"]["Code"] in exists:
            return False
        raise
    return True


def _named(items: list[dict[str, Any]], name: str, key: str = "name") -> dict[str, Any] | None:
    return next((item for item in items if item.get(key) == name), None)


def _buckets(s3: Any, names: ResourceNames) -> None:
    for bucket in (
        names.artifacts_bucket,
        names.payloads_bucket,
        names.batch_drop_bucket,
        names.prediction_logs_bucket,
    ):
        _made(s3.create_bucket, "BucketAlreadyOwnedByYou", "BucketAlreadyExists", Bucket=bucket)
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )


def _drop_notifications(s3: Any, sqs: Any, names: ResourceNames, queue_url: str) -> None:
    """The drop bucket tells the batch-drop queue of every ``.jsonl`` created, as the
    CDK app's notification does."""
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    s3.put_bucket_notification_configuration(
        Bucket=names.batch_drop_bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": arn["Attributes"]["QueueArn"],
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": DROP_SUFFIX}]}},
                }
            ]
        },
    )


def _prediction_logs(firehose: Any, names: ResourceNames) -> None:
    # The cloud stream partitions by model and date (dynamic partitioning); the
    # emulator keeps to a plain prefix.
    _made(
        firehose.create_delivery_stream,
        "ResourceInUseException",
        DeliveryStreamName=names.prediction_log_stream,
        DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/switchyard-local-firehose",
            "BucketARN": f"arn:aws:s3:::{names.prediction_logs_bucket}",
            "Prefix": "predictions/",
            "CompressionFormat": "GZIP",
        },
    )


def _tables(ddb: Any, names: ResourceNames) -> None:
    for name, keys in (
        (names.registry_table, tables.REGISTRY),
        (names.results_table, tables.RESULTS),
        (names.jobs_table, tables.JOBS),
    ):
        made = _made(
            ddb.create_table,
            "ResourceInUseException",
            TableName=name,
            KeySchema=[
                {"AttributeName": keys.partition, "KeyType": "HASH"},
                {"AttributeName": keys.sort, "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": keys.partition, "AttributeType": "S"},
                {"AttributeName": keys.sort, "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        if made and keys.ttl_attribute:
            ddb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": keys.ttl_attribute},
            )


def _queue_pair(
    sqs: Any, manifest: Manifest, name: str, dlq_name: str, visibility_seconds: int
) -> tuple[str, str]:
    """A queue and its DLQ, as the CDK app makes them: (DLQ URL, queue URL)."""
    p = manifest.platform
    dlq_url = sqs.create_queue(
        QueueName=dlq_name,
        Attributes={"MessageRetentionPeriod": str(p.dlq_retention_seconds)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(visibility_seconds),
            "MessageRetentionPeriod": str(p.message_retention_seconds),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": p.max_receive_count}
            ),
        },
    )["QueueUrl"]
    return dlq_url, url


def _api_keys(
    api: Any, manifest: Manifest, names: ResourceNames
) -> tuple[dict[str, str], dict[str, str]]:
    """Each tenant's key (value, id), in its tier's usage plan."""
    rest_api = _named(api.get_rest_apis(limit=500)["items"], names.rest_api)
    if rest_api is None:
        rest_api = api.create_rest_api(name=names.rest_api, apiKeySource="HEADER")
    usage_plans = api.get_usage_plans(limit=500)["items"]
    plans = {}
    for tier, limits in manifest.tiers.items():
        throttle = {"rateLimit": limits.rate, "burstLimit": limits.burst}
        quota = {"limit": limits.quota_per_day, "period": "DAY"}
        plan = _named(usage_plans, names.usage_plan(tier))
        if plan is None:
            plan = api.create_usage_plan(
                name=names.usage_plan(tier),
                throttle=throttle,
                quota=quota,
                apiStages=[{"apiId": rest_api["id"], "stage": "v1"}],
            )
        elif (plan.get("throttle"), plan.get("quota", {}).get("limit")) != (
            throttle,
            quota["limit"],
        ):  # the tier's limits changed in the manifest since the last run
            api.update_usage_plan(
                usagePlanId=plan["id"],
                patchOperations=[
                    {"op": "replace", "path": "/throttle/rateLimit", "value": str(limits.rate)},
                    {"op": "replace", "path": "/throttle/burstLimit", "value": str(limits.burst)},
                    {"op": "replace", "path": "/quota/limit", "value": str(limits.quota_per_day)},
                ],
            )
        plans[tier] = plan["id"]
    existing = api.get_api_keys(limit=500, includeValues=True)["items"]
    in_plan = {  # each plan's keys, read once
        plan_id: {k["id"] for k in api.get_usage_plan_keys(usagePlanId=plan_id)["items"]}
        for plan_id in plans.values()
    }
    keys, ids = {}, {}
    for tenant, spec in manifest.tenants.items():
        key = _named(existing, names.api_key(tenant))
        if key is None:  # a new tenant, or a first start: a new key
            key = api.create_api_key(
                name=names.api_key(tenant),
                enabled=True,
                value="sy-" + secrets.token_urlsafe(24),
                tags={TENANT_TAG: tenant},
            )
        for plan_id, held in in_plan.items():  # the key is in its tier's plan alone
            if plan_id == plans[spec.tier] and key["id"] not in held:
                api.create_usage_plan_key(usagePlanId=plan_id, keyId=key["id"], keyType="API_KEY")
            elif plan_id != plans[spec.tier] and key["id"] in held:
                api.delete_usage_plan_key(usagePlanId=plan_id, keyId=key["id"])
        keys[tenant], ids[tenant] = key["value"], key["id"]
    return keys, ids


def _routing(appconfig: Any, manifest: Manifest, names: ResourceNames) -> str:
    app = _named(
        appconfig.list_applications()["Items"], names.appconfig_application, "Name"
    ) or appconfig.create_application(Name=names.appconfig_application)
    profiles = appconfig.list_configuration_profiles(ApplicationId=app["Id"])["Items"]
    for model, spec in manifest.models.items():
        profile = _named(profiles, names.routing_profile(model), "Name")
        if profile is not None:  # kept from the last run, with its documents
            continue
        profile = appconfig.create_configuration_profile(
            ApplicationId=app["Id"],
            Name=names.routing_profile(model),
            LocationUri="hosted",
            Type="AWS.Freeform",
        )
        # As the CDK app's first document (stacks.configuration.initial_routing); until
        # the first version is registered, the router answers with the newest active one.
        document = RoutingDocument(weights={spec.first_version: 100})
        appconfig.create_hosted_configuration_version(
            ApplicationId=app["Id"],
            ConfigurationProfileId=profile["Id"],
            Content=document.model_dump_json().encode(),
            ContentType="application/json",
            Description=describe("provisioner", "initial routing document"),
        )
    return str(app["Id"])


def register_demo_models(provisioned: Provisioned, models_dir: Path) -> list[ModelVersion]:
    """Upload and register each ``demo_versions`` entry whose artifact is built in
    ``models_dir`` and that is not registered yet; returns what it registered.

    A demo model's artifacts are built by ``make models``: one missing is an error.
    Any other model's versions are what ``switchyard models register`` uploads; one
    that names ``demo_versions`` (a copied demo entry) and has no folder here is
    left to it, and said so."""
    adapters = build_adapters(Settings(**provisioned.settings_values()))
    s3, registry = adapters.client("s3"), adapters.registry
    registered = []
    for model, spec in provisioned.manifest.models.items():
        for version in spec.demo_versions:
            if registry.get(model, version) is not None:
                continue  # registered already (kept from the last run)
            path = built_artifact(models_dir, model, version)
            if path is None and is_demo(model):
                raise FileNotFoundError(
                    f"{models_dir / model / version} has no artifact: run `make models` first"
                )
            if path is None:
                print(
                    f"{model} {version}: not registered yet; register it with "
                    f"`switchyard models register {model} {version} --artifact FILE`",
                    flush=True,
                )
                continue
            uri, digest = publish_artifact(
                s3, provisioned.names.artifacts_bucket, model, version, path
            )
            extra = {}
            tokenizer = path.with_name(TOKENIZER_NAME)
            if tokenizer.exists():  # a generation model's: the router counts tokens with it
                tokenizer_uri, tokenizer_digest = publish_artifact(
                    s3, provisioned.names.artifacts_bucket, model, version, tokenizer
                )
                extra = {"tokenizer_uri": tokenizer_uri, "tokenizer_sha256": tokenizer_digest}
            record = spec.version_record(model, version, uri, digest, **extra)
            try:
                registry.register(record)
            except VersionExists:
                continue
            registered.append(record)
    return registered


def _webhook_secrets(client: Any, manifest: Manifest, names: ResourceNames) -> None:
    """One webhook secret per tenant (a job's callback is signed with it), as the
    CDK app makes them: random, in Secrets Manager under the stage's prefix."""
    for tenant in manifest.tenants:
        _made(
            client.create_secret,
            "ResourceExistsException",
            Name=f"{names.webhook_secret_prefix}{tenant}",
            SecretString=secrets.token_urlsafe(32),
            Description=f"Signs the job callbacks of tenant {tenant}",
        )
