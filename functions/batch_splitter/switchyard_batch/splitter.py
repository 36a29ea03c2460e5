"""Batch splitter: a JSON Lines file dropped in S3 becomes work on the batch lane.

Drop a file at ``s3://<batch-drop-bucket>/<tenant>/<model>/<name>.jsonl``, one input
per line (a string for text models, a list of numbers for tensor models). S3's
ObjectCreated notification goes to the batch-drop queue, whose messages invoke the
splitter. The splitter records a job, validates every line against the model
version's signature, and enqueues the valid lines in chunks on the model's batch
queue.
Request ids are derived from the job and chunk number, so a redelivered S3 event
enqueues the same requests again and the workers' conditional writes keep one
result per chunk.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from switchyard.payloads import PayloadStore
from switchyard.queues import WorkQueue, encode_message
from switchyard.registry import ModelVersion, Registry
from switchyard.schemas import QueueMessage
from switchyard.signatures import check_item
from switchyard.tables import JOBS
from switchyard.wiring import Adapters

MAX_REPORTED_ERRORS = 100
log = Logger(service="switchyard-batch-splitter")


class JobRejected(Exception):
    """The file cannot be run at all (unknown model or tenant path, no version)."""


def split_file(
    *,
    bucket: str,
    key: str,
    body: bytes,
    registry: Registry,
    queues: dict[str, WorkQueue],
    payloads: PayloadStore,
    claim_check_bytes: int,
    result_ttl_seconds: int,
    max_age_seconds: int = 86_400,
) -> dict[str, Any]:
    """Validate and enqueue one dropped file; returns the job record."""
    parts = key.split("/")
    if len(parts) < 3:
        raise JobRejected(f"{key}: expected <tenant>/<model>/<file>.jsonl")
    tenant, model = parts[0], parts[1]
    if model not in queues:
        raise JobRejected(f"{key}: unknown model {model!r}")
    version = _newest_active(registry, model)
    job_id = hashlib.sha256(f"{bucket}/{key}/{len(body)}".encode()).hexdigest()[:24]
    now = time.time()
    valid: list[Any] = []
    errors: list[dict[str, Any]] = []
    lines = body.decode("utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            errors.append({"line": number, "message": f"not valid JSON: {exc}"})
            continue
        problems = check_item(item, version.signature, f"line {number}")
        if problems:
            errors.append({"line": number, "message": f"{problems[0].field} {problems[0].message}"})
            continue
        valid.append(item)
    chunk_size = version.max_inputs_per_request
    chunks = [valid[i : i + chunk_size] for i in range(0, len(valid), chunk_size)]
    for index, chunk in enumerate(chunks):
        message = QueueMessage(
            request_id=f"{job_id}-{index:05d}",
            tenant=tenant,
            model=model,
            version=version.version,
            lane="batch",
            inputs=chunk,
            n_inputs=len(chunk),
            enqueued_at=time.time(),
            expires_at=now + max_age_seconds,  # the batch lane's maximum age
        )
        queues[model].send(encode_message(message, payloads, claim_check_bytes), tenant)
    return {
        "job_id": job_id,
        "tenant": tenant,
        "model": model,
        "version": version.version,
        "source": f"s3://{bucket}/{key}",
        "inputs": len(valid),
        "rejected": len(errors),
        "errors": errors[:MAX_REPORTED_ERRORS],
        "chunks": len(chunks),
        "request_ids": [f"{job_id}-{i:05d}" for i in range(len(chunks))],
        "created_at": now,
        "expires_at": int(now + result_ttl_seconds),
        "status": "queued" if chunks else "empty",
    }


def _newest_active(registry: Registry, model: str) -> ModelVersion:
    active = [v for v in registry.versions(model) if v.status == "active"]
    if not active:
        raise JobRejected(f"model {model!r} has no active version")
    return max(active, key=lambda v: v.created_at)


def _put_job(ddb: Any, table: str, job: dict[str, Any]) -> None:
    ddb.put_item(
        TableName=table,
        Item={
            JOBS.partition: {"S": job["tenant"]},
            JOBS.sort: {"S": job["job_id"]},
            "status": {"S": job["status"]},
            JOBS.ttl_attribute or "expires_at": {"N": str(job["expires_at"])},
            "doc": {"S": json.dumps(job)},
        },
    )


def handle_event(
    event: dict[str, Any], adapters: Adapters, jobs_table: str
) -> list[dict[str, Any]]:
    """Split every file an S3 event names; a rejected file is logged and skipped."""
    settings = adapters.settings
    s3, ddb = adapters.client("s3"), adapters.client("dynamodb")
    queues = {model: lanes.batch for model, lanes in adapters.queues.items()}
    jobs = []
    for record in event.get("Records", []):
        bucket = record["s3"]["bucket"]["name"]
        key = unquote_plus(record["s3"]["object"]["key"])
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            job = split_file(
                bucket=bucket,
                key=key,
                body=body,
                registry=adapters.registry,
                queues=queues,
                payloads=adapters.payloads,
                claim_check_bytes=settings.claim_check_bytes,
                result_ttl_seconds=settings.result_ttl_seconds,
                max_age_seconds=settings.max_age_seconds["batch"],
            )
        except JobRejected as exc:
            log.warning("job rejected", extra={"key": key, "error": str(exc)})
            continue
        _put_job(ddb, jobs_table, job)
        jobs.append(job)
    return jobs


def handle_sqs_event(
    event: dict[str, Any], context: Any, adapters: Adapters, jobs_table: str
) -> dict[str, Any]:
    """The function's event: a batch of SQS messages, each an S3 notification (S3's
    test event, sent when the notification is set up, names no object). A message
    whose files cannot be split for a passing reason is reported back as failed, so
    SQS delivers it again (and, after the queue's maxReceiveCount, to its DLQ);
    the rest of the batch is done."""
    processor = BatchProcessor(event_type=EventType.SQS)

    def split_message(record: SQSRecord) -> None:
        notification = json.loads(record.body)
        for job in handle_event(notification, adapters, jobs_table):
            log.info("job queued", extra=summary(job))

    return process_partial_response(event, split_message, processor, context)


def summary(job: dict[str, Any]) -> dict[str, Any]:
    """A job's id and counts, as logged."""
    return {k: job[k] for k in ("job_id", "model", "inputs", "rejected", "chunks")}
