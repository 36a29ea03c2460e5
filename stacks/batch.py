"""Batch scoring: a file dropped in S3 becomes a job on the model's batch queue."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from constructs import Construct

from stacks.cloud import SPLITTER_MEMORY_MB, SPLITTER_TIMEOUT, Deployment
from stacks.data import Storage, grant_items, grant_objects, grant_registry_read
from stacks.functions import FunctionCode, PlatformFunction, settings_environment
from stacks.nag import acknowledge
from stacks.queues import ModelQueues
from switchyard.settings import SplitterSettings


class BatchIngest(Construct):
    """The splitter function, notified by S3 of every object created in the drop
    bucket; it records a job and enqueues its items on the model's batch queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        code: FunctionCode,
        storage: Storage,
        queues: Mapping[str, ModelQueues],
    ) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
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
                queues={model: q.urls() for model, q in queues.items()},
                service="batch-splitter",
                jobs_table=storage.jobs_table.table_name,
            ),
            layers=[code.core_layer],
            timeout=SPLITTER_TIMEOUT,
            memory_size=SPLITTER_MEMORY_MB,
        )
        role = self.splitter.role
        grant_items(storage.jobs_table, role)
        grant_registry_read(storage.registry_table, role)
        for model_queues in queues.values():
            model_queues.batch.grant_send_messages(role)
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
        # notification (and its permission) beside the function, with no cycle.
        drop = s3.Bucket.from_bucket_attributes(
            self,
            "DropBucket",
            bucket_arn=storage.batch_drop_bucket.bucket_arn,
            bucket_name=storage.batch_drop_bucket.bucket_name,
        )
        drop.add_event_notification(
            s3.EventType.OBJECT_CREATED, s3n.LambdaDestination(self.splitter.function)
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
