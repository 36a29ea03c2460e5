"""A model's work queues: realtime and batch, each with its dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.cloud import Deployment
from stacks.nag import acknowledge
from switchyard.manifest import ModelSpec


def queue_with_dlq(
    scope: Construct,
    prefix: str,
    *,
    deployment: Deployment,
    name: str,
    dlq_name: str,
    visibility_seconds: int,
    dlq_reason: str,
    receive_wait_seconds: int = 0,
) -> tuple[sqs.Queue, sqs.Queue]:
    """A work queue and its dead-letter queue, as every queue of the platform is made
    (the local provisioner makes the same pair on the emulator)."""
    platform = deployment.manifest.platform
    dlq = sqs.Queue(
        scope,
        f"{prefix}Dlq",
        queue_name=dlq_name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.seconds(platform.dlq_retention_seconds),
    )
    acknowledge(dlq, "AwsSolutions-SQS3", dlq_reason)
    queue = sqs.Queue(
        scope,
        f"{prefix}Queue",
        queue_name=name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        visibility_timeout=Duration.seconds(visibility_seconds),
        retention_period=Duration.seconds(platform.message_retention_seconds),
        receive_message_wait_time=Duration.seconds(receive_wait_seconds),
        dead_letter_queue=sqs.DeadLetterQueue(
            queue=dlq, max_receive_count=platform.max_receive_count
        ),
    )
    return queue, dlq


class ModelQueues(Construct):
    """Standard queues, so a message's MessageGroupId (the tenant) makes them fair
    queues: SQS serves quiet tenants first when one tenant builds a backlog."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        model: str,
        spec: ModelSpec,
    ) -> None:
        super().__init__(scope, construct_id)
        platform = deployment.manifest.platform
        names = deployment.names
        longest_batch_ms = spec.max_wait_ms + spec.default_deadline_ms
        if platform.visibility_timeout_seconds * 1000 <= longest_batch_ms:
            raise ValueError(
                f"visibility_timeout_seconds ({platform.visibility_timeout_seconds}s) must "
                f"exceed {model}'s longest batch (max_wait_ms + default_deadline_ms = "
                f"{longest_batch_ms} ms), or in-flight work would be delivered twice"
            )
        self.dlqs: dict[str, sqs.Queue] = {}
        self.queues: dict[str, sqs.Queue] = {}
        for lane in ("realtime", "batch"):
            self.queues[lane], self.dlqs[lane] = queue_with_dlq(
                self,
                lane.title(),
                deployment=deployment,
                name=names.queue(model, lane),
                dlq_name=names.dlq(model, lane),
                visibility_seconds=platform.visibility_timeout_seconds,
                dlq_reason=f"This is the dead-letter queue of {model}'s {lane} queue; a poison "
                "message stops here for an operator, alarmed on the first arrival.",
                receive_wait_seconds=20,
            )

    @property
    def realtime(self) -> sqs.Queue:
        return self.queues["realtime"]

    @property
    def batch(self) -> sqs.Queue:
        return self.queues["batch"]

    def urls(self) -> dict[str, str]:
        """The ``SWITCHYARD_QUEUES`` entry of this model."""
        return {lane: queue.queue_url for lane, queue in self.queues.items()}
