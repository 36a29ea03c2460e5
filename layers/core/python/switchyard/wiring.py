"""The platform's adapters, built from validated settings in one place.

The router, the splitter, the workers and the local platform's own tools all call
:func:`build_adapters`; none of them makes its own boto3 clients or stores, so the
emulator and AWS differ only in ``settings.aws_endpoint_url``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard import aws
from switchyard.payloads import S3PayloadStore
from switchyard.queues import ModelLanes, SqsWorkQueue
from switchyard.registry import DynamoDBRegistry
from switchyard.result_cache import DynamoDBResultCache
from switchyard.results import DynamoDBResultStore
from switchyard.settings import Settings
from switchyard.telemetry import FirehosePredictionLog


@dataclass(frozen=True)
class Adapters:
    """The stores and queues a process of the platform reaches AWS through."""

    settings: Settings
    registry: DynamoDBRegistry
    results: DynamoDBResultStore
    cache: DynamoDBResultCache
    payloads: S3PayloadStore
    queues: dict[str, ModelLanes]

    def client(self, service: str) -> Any:
        """A client for ``service``, at the emulator locally, made on first use."""
        return aws.LazyClient(service, self.settings.region, self.settings.aws_endpoint_url)

    def prediction_log(self, stream: str | None) -> FirehosePredictionLog | None:
        return FirehosePredictionLog(self.client("firehose"), stream) if stream else None


def build_adapters(settings: Settings) -> Adapters:
    def client(service: str) -> Any:
        return aws.client(service, settings.region, settings.aws_endpoint_url)

    s3 = aws.LazyClient("s3", settings.region, settings.aws_endpoint_url)
    payloads = S3PayloadStore(s3, settings.payloads_bucket)
    sqs = client("sqs")
    return Adapters(
        settings=settings,
        registry=DynamoDBRegistry(client("dynamodb"), settings.registry_table),
        results=DynamoDBResultStore(
            client("dynamodb"), settings.results_table, payloads, settings.result_inline_bytes
        ),
        cache=DynamoDBResultCache(client("dynamodb"), settings.results_table),
        payloads=payloads,
        queues={
            model: ModelLanes(
                realtime=SqsWorkQueue(sqs, pair.realtime, "realtime"),
                batch=SqsWorkQueue(sqs, pair.batch, "batch"),
            )
            for model, pair in settings.queues.items()
        },
    )
