"""Batch scoring: a file dropped in S3 becomes a job on the model's batch queue."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as lambda_events
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from constructs import Construct

from stacks.cloud import SPLITTER_MEMORY_MB, Deployment
from stacks.configuration import EveryModelRouting
from stacks.data import (
    Storage,
    grant_budget_reads,
    grant_items,
    grant_objects,
    grant_registry_read,
)
from stacks.functions import FunctionCode, PlatformFunction, settings_environment
from stacks.nag import acknowledge
from stacks.queues import ModelQueues, every_models_queues, queue_with_dlq
from switchyard.manifest import DROP_BATCH_SIZE, DROP_SUFFIX
from switchyard.settings import RouterSettings, SplitterSettings, WorkerSettings, variable


class BatchIngest(Construct):
    """The splitter function, fed by a queue of the drop bucket's ObjectCreated
    notifications; it records a job and enqueues its items on the model's batch
    queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        code: FunctionCode,
        storage: Storage,
        queues: Mapping[str, ModelQueues],
        routing: EveryModelRouting,
    ) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        # Drops reach the splitter through a queue (S3 -> SQS -> the function's event
        # source mapping): a burst of files waits in the queue, a file whose split
        # fails is retried alone (partial batch responses), and one that keeps
        # failing lands in the DLQ instead of being lost.
        self.drop_queue, self.drop_dlq = queue_with_dlq(
            self,
            "Drop",
            deployment=deployment,
            name=names.batch_drop_queue,
            dlq_name=names.batch_drop_dlq,
            visibility_seconds=deployment.manifest.platform.drop_queue_visibility_seconds,
            dlq_reason="This is the dead-letter queue of the batch-drop queue: a dropped file "
            "whose split keeps failing stops here for an operator.",
        )
        self.splitter = PlatformFunction(
            self,
            "Splitter",
            deployment=deployment,
            code=code.splitter,
            description="Switchyard batch splitter: dropped file -> job -> batch queue",
            environment=settings_environment(
                self,
                SplitterSettings,
                deployment=deployment,
                storage=storage,
                **every_models_queues(self, deployment, queues),
                service="batch-splitter",
                jobs_table=storage.jobs_table.table_name,
                drop_queue_url=self.drop_queue.queue_url,
                webhook_secret_prefix=names.webhook_secret_prefix,
                **routing.settings,
                **deployment.manifest.budget_values(),
            )
            | routing.environment,
            layers=[code.core_layer, code.appconfig_extension],
            timeout=Duration.seconds(deployment.manifest.platform.splitter_timeout_seconds),
            memory_size=SPLITTER_MEMORY_MB,
            # A burst of dropped files waits in the drop queue, not in the account's
            # unreserved pool.
            reserved_concurrency=deployment.settings.concurrency.splitter,
        )
        role = self.splitter.role
        grant_items(storage.jobs_table, role)
        # It delivers jobs' callbacks, signed with the tenants' webhook secrets.
        storage.grant_webhook_secrets(role)
        grant_registry_read(storage.registry_table, role)
        # A dropped file's job is refused for a tenant over its budget.
        grant_budget_reads(storage.results_table, role, deployment.manifest)
        # A job runs on its model's stable version, read from its routing document.
        routing.grant_read(role)
        for model_queues in queues.values():
            model_queues.batch.grant_send_messages(role)
        # A split longer than one invocation continues through its own queue.
        self.drop_queue.grant_send_messages(role)
        grant_objects(
            names.batch_drop_bucket,
            role,
            ["s3:GetObject"],
            "The splitter reads whichever file a data team dropped; its key is theirs.",
        )
        grant_objects(
            names.payloads_bucket,
            role,
            ["s3:PutObject"],
            "The splitter writes claim-checked item payloads under per-job keys.",
        )

        # The drop bucket lives in the data stack; importing it here keeps the
        # notification beside the queue it feeds, with no cycle.
        drop = s3.Bucket.from_bucket_attributes(
            self,
            "DropBucket",
            bucket_arn=storage.batch_drop_bucket.bucket_arn,
            bucket_name=storage.batch_drop_bucket.bucket_name,
        )
        drop.add_event_notification(
            s3.EventType.OBJECT_CREATED,
            s3n.SqsDestination(self.drop_queue),
            s3.NotificationKeyFilter(suffix=DROP_SUFFIX),
        )
        self.splitter.function.add_event_source(
            lambda_events.SqsEventSource(
                self.drop_queue, batch_size=DROP_BATCH_SIZE, report_batch_item_failures=True
            )
        )
        for child in Stack.of(self).node.children:
            if child.node.id.startswith("BucketNotificationsHandler"):
                acknowledge(
                    child,
                    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
                    "service-role/AWSLambdaBasicExecutionRole]",
                    "CDK's deploy-time handler that puts the drop bucket's notification; "
                    "it only writes its own logs, which is what this managed policy grants.",
                )

    def takes_job_ends_from(
        self, deployable: lambda_.Function | ecs.ContainerDefinition, role: iam.IGrantable
    ) -> None:
        """Let a router function or a worker container ask for an ended job's
        callback: its ``drop_queue_url`` setting, and sending to that queue."""
        kind = RouterSettings if isinstance(deployable, lambda_.Function) else WorkerSettings
        deployable.add_environment(variable(kind, "drop_queue_url"), self.drop_queue.queue_url)
        self.drop_queue.grant_send_messages(role)
