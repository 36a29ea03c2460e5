"""The platform's state: tables, buckets and the prediction-log stream.

Kept in its own stack so the serving side can be replaced or torn down without
touching registry entries, results or logs.
"""

from __future__ import annotations

import base64
import math

from aws_cdk import Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from stacks.cloud import LOG_RETENTION, Deployment
from stacks.nag import acknowledge, logical_id, objects_of, skip_checkov
from switchyard import tables
from switchyard.manifest import Manifest


class Storage(Construct):
    """Registry, results and jobs tables; artifact, payload, drop and log buckets."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        self._deployment = deployment
        names = deployment.names

        self.registry_table = self._table("Registry", names.registry_table, tables.REGISTRY)
        self.results_table = self._table("Results", names.results_table, tables.RESULTS)
        self.jobs_table = self._table("Jobs", names.jobs_table, tables.JOBS)

        self.access_logs_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
            removal_policy=deployment.removal_policy,
            auto_delete_objects=not deployment.is_prod,
        )
        acknowledge(
            self.access_logs_bucket,
            "AwsSolutions-S1",
            "This bucket receives the server access logs of the platform's buckets; "
            "logging it into itself would loop.",
        )
        skip_checkov(
            self.access_logs_bucket,
            "CKV_AWS_18",
            "This bucket receives the server access logs of the platform's buckets; "
            "logging it into itself would loop.",
        )
        skip_checkov(
            self.access_logs_bucket,
            "CKV_AWS_21",
            "S3's log delivery writes each log object once under a key of its own, and "
            "nothing overwrites one; they expire after 90 days.",
        )
        # Model artifacts are immutable per version; versioning guards against overwrites.
        self.artifacts_bucket = self._bucket("Artifacts", names.artifacts_bucket, versioned=True)
        # Claim-check payloads live as long as the results that point at them.
        payload_days = math.ceil(deployment.manifest.platform.result_ttl_seconds / 86_400) + 1
        self.payloads_bucket = self._bucket(
            "Payloads",
            names.payloads_bucket,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(payload_days))],
        )
        skip_checkov(
            self.payloads_bucket,
            "CKV_AWS_21",
            "Claim-check payloads are written once under a fresh key each and read back "
            "by that key; nothing overwrites one, and each lives only as long as its "
            "result.",
        )
        # Tenants' files and their jobs' outputs: versioned, so a file overwritten or
        # deleted by mistake (a tenant's drop credentials can do both) is kept for
        # noncurrent_days; each tenant's prefix expires after its retention.
        self.batch_drop_bucket = self._bucket(
            "BatchDrop",
            names.batch_drop_bucket,
            versioned=True,
            lifecycle_rules=drop_lifecycle(deployment),
        )
        self.prediction_logs_bucket = self._bucket(
            "PredictionLogs",
            names.prediction_logs_bucket,
            lifecycle_rules=[
                s3.LifecycleRule(
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=Duration.days(30),
                        )
                    ]
                )
            ],
        )
        skip_checkov(
            self.prediction_logs_bucket,
            "CKV_AWS_21",
            "Firehose writes each prediction-log object once under a key of its own "
            "(model, date, buffer); nothing in the platform overwrites or deletes one.",
        )

        # One webhook secret per tenant: it signs the tenant's job callbacks
        # (switchyard.callbacks); the operator hands it over (switchyard jobs secret).
        self.webhook_secrets = {
            tenant: secretsmanager.Secret(
                self,
                f"Webhook-{tenant}",
                secret_name=f"{names.webhook_secret_prefix}{tenant}",
                description=f"Signs the job callbacks of tenant {tenant}",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    exclude_punctuation=True, password_length=43
                ),
                removal_policy=deployment.removal_policy,
            )
            for tenant in deployment.manifest.tenants
        }
        for secret in self.webhook_secrets.values():
            acknowledge(
                secret,
                "AwsSolutions-SMG4",
                "A tenant's webhook secret is shared with the tenant, who checks callbacks "
                "with it; it is rotated by an operator together with the tenant, not on a "
                "schedule the tenant cannot follow.",
            )

        # One role per tenant for its data team's drops: put and read under its own
        # prefix of the drop bucket, nothing else; assumed from the tenant's account
        # (the manifest's account_id) or, without one, from this account.
        self.drop_roles = {
            tenant: self._drop_role(tenant, spec.account_id, names.base)
            for tenant, spec in deployment.manifest.tenants.items()
        }

    def grant_webhook_secrets(self, grantee: iam.IGrantable) -> None:
        """Read every tenant's webhook secret (to sign callbacks)."""
        for secret in self.webhook_secrets.values():
            secret.grant_read(grantee)

    def _table(self, construct_id: str, name: str, keys: tables.TableKeys) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            table_name=name,
            partition_key=dynamodb.Attribute(
                name=keys.partition, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=keys.sort, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=keys.ttl_attribute,
            deletion_protection=self._deployment.is_prod,
            removal_policy=self._deployment.removal_policy,
        )

    def _drop_role(self, tenant: str, account_id: str | None, base: str) -> iam.Role:
        trusted = iam.AccountPrincipal(account_id) if account_id else iam.AccountRootPrincipal()
        role = iam.Role(
            self,
            f"Drop-{tenant}",
            role_name=f"{base}-drop-{tenant}",
            assumed_by=trusted,
            description=f"Tenant {tenant}'s data team: drops under {tenant}/ of the drop bucket",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
                resources=[self.batch_drop_bucket.arn_for_objects(f"{tenant}/*")],
            )
        )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::<{logical_id(self.batch_drop_bucket)}.Arn>/{tenant}/*]",
            f"Tenant {tenant}'s drop role reaches every object under its own prefix "
            f"({tenant}/) and no other: its files and its jobs' outputs have names "
            "chosen at drop time.",
        )
        return role

    def _bucket(
        self,
        construct_id: str,
        name: str,
        *,
        versioned: bool = False,
        lifecycle_rules: list[s3.LifecycleRule] | None = None,
    ) -> s3.Bucket:
        return s3.Bucket(
            self,
            construct_id,
            bucket_name=self._deployment.bucket_name(name),
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=versioned,
            lifecycle_rules=lifecycle_rules,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix=f"{name}/",
            removal_policy=self._deployment.removal_policy,
            auto_delete_objects=not self._deployment.is_prod,
        )


def drop_lifecycle(deployment: Deployment) -> list[s3.LifecycleRule]:
    """The drop bucket's lifecycle: one expiry rule per tenant prefix (every key
    there is ``<tenant>/<model>/...``), and one for what versioning and multipart
    uploads leave behind."""
    manifest = deployment.manifest
    drop = deployment.settings.drop
    rules = [
        s3.LifecycleRule(
            id=f"tenant-{tenant}",
            prefix=f"{tenant}/",
            expiration=Duration.days(manifest.drop_retention_days(tenant, deployment.stage)),
        )
        for tenant in manifest.tenants
    ]
    rules.append(
        s3.LifecycleRule(
            id="replaced-and-unfinished",
            noncurrent_version_expiration=Duration.days(drop.noncurrent_days),
            abort_incomplete_multipart_upload_after=Duration.days(drop.incomplete_upload_days),
            expired_object_delete_marker=True,
        )
    )
    return rules


# Item-level writes the code performs (conditional puts, status updates); no scans,
# batch writes or deletes: expiry is TTL's job.
ITEM_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
# What a worker does to the results table beyond single items: it reads a batch's
# statuses in one BatchGetItem (answered requests are not run again), inserts a
# batch's new results with one BatchExecuteStatement of PartiQL INSERTs (an INSERT
# never replaces an item), stores its other results over their queued records with
# one of PartiQL UPDATEs (each only while the item is queued), and caches outputs
# with one BatchWriteItem of puts.
WORKER_RESULTS_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:BatchWriteItem",
)


# Registry reads are one version (GetItem) or one model's versions (Query).
REGISTRY_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query")


def grant_items(table: dynamodb.ITable, grantee: iam.IGrantable) -> None:
    """Read and write single items of ``table``, nothing wider."""
    table.grant(grantee, *ITEM_ACTIONS)


def grant_router_reads(table: dynamodb.ITable, grantee: iam.IGrantable) -> None:
    """A router reads many results items in one BatchGetItem: the results its sync
    callers wait for, when their looks fall due together (switchyard_router.waiters),
    and the budgets of tenants that have one (switchyard.budgets)."""
    table.grant(grantee, "dynamodb:BatchGetItem")


def grant_budget_reads(table: dynamodb.ITable, grantee: iam.IGrantable, manifest: Manifest) -> None:
    """Where a tenant has a budget, a router reads its month's spend and any raised
    budget in one BatchGetItem before it queues the tenant's work (switchyard.budgets)."""
    if manifest.budgeted_tenants():
        table.grant(grantee, "dynamodb:BatchGetItem")


def grant_registry_read(table: dynamodb.ITable, grantee: iam.IGrantable) -> None:
    """Look up versions by model; registering versions is the operators' job."""
    table.grant(grantee, *REGISTRY_READ_ACTIONS)


def grant_objects(bucket_name: str, role: iam.IRole, actions: list[str], why: str) -> None:
    """Exactly ``actions`` on the objects of the bucket the manifest calls
    ``bucket_name`` (no ``s3:*Object*`` wildcards). The ARN is built from the name,
    not from the bucket construct in the other stack, so the object wildcard's
    cdk-nag finding has a stable spelling to acknowledge with ``why``."""
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=actions, resources=[Deployment.bucket_objects_arn(bucket_name)])
    )
    acknowledge(
        role,
        f"AwsSolutions-IAM5[Resource::{Deployment.bucket_objects_finding(bucket_name)}]",
        why,
    )


class PredictionLog(Construct):
    """Firehose → S3, one JSON line per prediction, partitioned by model and date.

    Workers send a batch's predictions as newline-terminated JSON lines in one
    record (``switchyard.telemetry.FirehosePredictionLog``: Firehose bills a record
    rounded up to 5 KB); the stream splits each record at its newlines (at most 500
    lines a record), reads each line's top-level ``model`` with JQ (dynamic
    partitioning), ends each line with a newline again and writes gzip objects under
    ``model=<model>/date=<yyyy-MM-dd>/``.
    """

    BUFFER_SECONDS = 60
    BUFFER_MB = 64  # the minimum with dynamic partitioning

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self.stream_name = deployment.names.prediction_log_stream
        errors = logs.LogGroup(
            self,
            "DeliveryErrors",
            retention=LOG_RETENTION,
            removal_policy=deployment.removal_policy,
        )
        errors_stream = errors.add_stream("S3Delivery")
        role = iam.Role(
            self,
            "DeliveryRole",
            assumed_by=iam.ServicePrincipal("firehose.amazonaws.com"),
            description="Lets the prediction-log stream write its objects and its errors",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "s3:AbortMultipartUpload",
                    "s3:GetBucketLocation",
                    "s3:GetObject",
                    "s3:ListBucket",
                    "s3:ListBucketMultipartUploads",
                    "s3:PutObject",
                ],
                resources=[bucket.bucket_arn, bucket.arn_for_objects("*")],
            )
        )
        errors.grant_write(role)
        acknowledge(
            role,
            objects_of(bucket),
            "Firehose writes one object per buffer under keys it derives from each "
            "record's model and date; the keys are not known in advance.",
        )
        self.stream = firehose.CfnDeliveryStream(
            self,
            "Stream",
            delivery_stream_name=self.stream_name,
            delivery_stream_type="DirectPut",
            delivery_stream_encryption_configuration_input=firehose.CfnDeliveryStream.DeliveryStreamEncryptionConfigurationInputProperty(
                key_type="AWS_OWNED_CMK"
            ),
            extended_s3_destination_configuration=firehose.CfnDeliveryStream.ExtendedS3DestinationConfigurationProperty(
                bucket_arn=bucket.bucket_arn,
                role_arn=role.role_arn,
                prefix="model=!{partitionKeyFromQuery:model}/date=!{timestamp:yyyy-MM-dd}/",
                error_output_prefix="errors/!{firehose:error-output-type}/date=!{timestamp:yyyy-MM-dd}/",
                compression_format="GZIP",
                buffering_hints=firehose.CfnDeliveryStream.BufferingHintsProperty(
                    interval_in_seconds=self.BUFFER_SECONDS, size_in_m_bs=self.BUFFER_MB
                ),
                dynamic_partitioning_configuration=firehose.CfnDeliveryStream.DynamicPartitioningConfigurationProperty(
                    enabled=True,
                    retry_options=firehose.CfnDeliveryStream.RetryOptionsProperty(
                        duration_in_seconds=300
                    ),
                ),
                processing_configuration=firehose.CfnDeliveryStream.ProcessingConfigurationProperty(
                    enabled=True,
                    processors=[
                        _processor(
                            "RecordDeAggregation",
                            SubRecordType="DELIMITED",
                            Delimiter=base64.b64encode(b"\n").decode(),
                        ),
                        _processor(
                            "MetadataExtraction",
                            MetadataExtractionQuery="{model: .model}",
                            JsonParsingEngine="JQ-1.6",
                        ),
                        _processor("AppendDelimiterToRecord"),
                    ],
                ),
                cloud_watch_logging_options=firehose.CfnDeliveryStream.CloudWatchLoggingOptionsProperty(
                    enabled=True,
                    log_group_name=errors.log_group_name,
                    log_stream_name=errors_stream.log_stream_name,
                ),
            ),
        )
        # The stream checks its role's grants when it is created: it waits for the
        # role's policy (its RoleARN already waits for the role itself).
        self.stream.node.add_dependency(role.node.find_child("DefaultPolicy"))
        self.stream_arn = self.stream.attr_arn


def _processor(kind: str, **parameters: str) -> firehose.CfnDeliveryStream.ProcessorProperty:
    return firehose.CfnDeliveryStream.ProcessorProperty(
        type=kind,
        parameters=[
            firehose.CfnDeliveryStream.ProcessorParameterProperty(
                parameter_name=name, parameter_value=value
            )
            for name, value in parameters.items()
        ],
    )


class DataStack(Stack):
    """Stateful resources of one stage."""

    def __init__(
        self, scope: Construct, construct_id: str, *, deployment: Deployment, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.storage = Storage(self, "Storage", deployment=deployment)
        self.prediction_log = PredictionLog(
            self,
            "PredictionLog",
            deployment=deployment,
            bucket=self.storage.prediction_logs_bucket,
        )
