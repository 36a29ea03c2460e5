"""Worker entry point (the ECS task's command, and the local supervisor's process)."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
from pathlib import Path

from switchyard import aws
from switchyard.artifacts import fetch_artifact
from switchyard.payloads import S3PayloadStore
from switchyard.queues import SqsWorkQueue
from switchyard.registry import DynamoDBRegistry, ModelVersion
from switchyard.results import DynamoDBResultStore
from switchyard.settings import WorkerSettings, get_settings
from switchyard.telemetry import FirehosePredictionLog
from switchyard_worker.runtimes import ModelRuntime, load_runtime
from switchyard_worker.worker import Worker


def main() -> None:
    settings = get_settings(WorkerSettings)
    assert isinstance(settings, WorkerSettings)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def client(service: str):  # noqa: ANN202
        return aws.client(service, settings.region, settings.aws_endpoint_url)

    if settings.worker_model not in settings.queues:
        raise SystemExit(f"SWITCHYARD_WORKER_MODEL: no queues for {settings.worker_model!r}")
    pair = settings.queues[settings.worker_model]
    sqs, s3 = client("sqs"), client("s3")
    payloads = S3PayloadStore(s3, settings.payloads_bucket)
    cache = Path(settings.artifacts_cache)

    def runtime_for(record: ModelVersion) -> ModelRuntime:
        artifact = fetch_artifact(s3, record.artifact_uri, record.sha256, cache)
        return load_runtime(record, artifact, cache / "unpacked")

    prediction_log = None
    if settings.prediction_log_stream:
        prediction_log = FirehosePredictionLog(client("firehose"), settings.prediction_log_stream)
    worker = Worker(
        model=settings.worker_model,
        worker_id=f"{socket.gethostname()}-{os.getpid()}",
        realtime=SqsWorkQueue(sqs, pair.realtime, "realtime"),
        batch=SqsWorkQueue(sqs, pair.batch, "batch"),
        registry=DynamoDBRegistry(client("dynamodb"), settings.registry_table),
        results=DynamoDBResultStore(
            client("dynamodb"), settings.results_table, payloads, settings.result_inline_bytes
        ),
        payloads=payloads,
        load_runtime=runtime_for,
        visibility_timeout=settings.visibility_timeout_seconds,
        poll_wait_seconds=settings.poll_wait_seconds,
        prediction_log=prediction_log,
    )
    worker.install_signal_handlers()
    # `kill -USR1` prints every thread's stack to the log: how to see what a worker
    # that does not stop is doing (the local supervisor sends it before a SIGKILL).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    worker.preload()

    def ready() -> None:
        if settings.ready_file:
            Path(settings.ready_file).write_text(worker.worker_id)

    worker.run(ready)


if __name__ == "__main__":
    main()
