"""A model's work queues: realtime and batch, each with its dead-letter queue."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.cloud import Deployment
from stacks.nag import acknowledge
from switchyard.manifest import ModelSpec
from switchyard.schemas import LANES


def queue_url(scope: Construct, name: str) -> str:
    """The URL of the queue named ``name`` in ``scope``'s account and region."""
    stack = Stack.of(scope)
    return f"https://sqs.{stack.region}.{stack.url_suffix}/{stack.account}/{name}"


def every_models_queues(
    scope: Construct, deployment: Deployment, models: Iterable[str]
) -> dict[str, Any]:
    """The settings (``queues``, ``queue_url_prefix``) of a function that reaches
    every model's queues: each URL less the part all of them share, which is given
    once, so that a catalogue of models fits in Lambda's 4 KB of environment."""
    names = deployment.names
    shared = f"{names.base}-"
    return {
        "queues": {
            model: {lane: names.queue(model, lane).removeprefix(shared) for lane in LANES}
            for model in models
        },
        "queue_url_prefix": queue_url(scope, shared),
    }


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
    """A model's queues as a stack uses them: each lane's work queue and its DLQ,
    made here (:class:`MadeQueues`) or another stack's (:class:`NamedQueues`)."""

    queues: dict[str, sqs.IQueue]
    dlqs: dict[str, sqs.IQueue]

    @property
    def realtime(self) -> sqs.IQueue:
        return self.queues["realtime"]

    @property
    def batch(self) -> sqs.IQueue:
        return self.queues["batch"]

    def urls(self) -> dict[str, str]:
        """The ``SWITCHYARD_QUEUES`` entry of this model."""
        return {lane: queue.queue_url for lane, queue in self.queues.items()}


class MadeQueues(ModelQueues):
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
        self.queues, self.dlqs = {}, {}
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


class NamedQueues(ModelQueues):
    """A model's queues made in another stack (``stacks.models``), referred to by
    their names, which are fixed (``ResourceNames.queue``, ``.dlq``): no
    CloudFormation export ties the two stacks, so a model can leave the manifest
    without the serving stack holding on to its queues' exports."""

    def __init__(
        self, scope: Construct, construct_id: str, *, deployment: Deployment, model: str
    ) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        stack = Stack.of(self)

        def named(construct_id: str, name: str) -> sqs.IQueue:
            return sqs.Queue.from_queue_attributes(
                self,
                construct_id,
                queue_arn=stack.format_arn(
                    service="sqs", resource=name, arn_format=ArnFormat.NO_RESOURCE_NAME
                ),
                queue_url=queue_url(self, name),
                queue_name=name,
            )

        self.queues, self.dlqs = {}, {}
        for lane in ("realtime", "batch"):
            self.queues[lane] = named(f"{lane.title()}Queue", names.queue(model, lane))
            self.dlqs[lane] = named(f"{lane.title()}Dlq", names.dlq(model, lane))
