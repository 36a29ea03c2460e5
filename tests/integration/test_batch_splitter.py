"""A file dropped in the batch bucket becomes validated work on the batch lane."""

from __future__ import annotations

import json

from switchyard.registry import DynamoDBRegistry
from switchyard.schemas import QueueMessage
from switchyard.settings import SplitterSettings
from switchyard.wiring import build_adapters
from switchyard_batch.splitter import handle_event


def event(bucket: str, key: str) -> dict:
    return {"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]}


def test_a_dropped_file_is_validated_split_and_enqueued_once(
    manifest, provisioned, clients, emulator_url
):
    names = manifest.names("dev")
    spec = manifest.models["digits-cnn"]
    DynamoDBRegistry(clients("dynamodb"), names.registry_table).register(
        spec.version_record("digits-cnn", "v1", "s3://x/y", "0" * 64)
    )
    lines = [json.dumps([1] * 64)] * 300 + ["not json", json.dumps([1] * 3), ""]
    key = "acme/digits-cnn/scores.jsonl"
    clients("s3").put_object(Bucket=names.batch_drop_bucket, Key=key, Body="\n".join(lines))
    adapters = build_adapters(SplitterSettings(**provisioned.splitter_values()))

    (job,) = handle_event(event(names.batch_drop_bucket, key), adapters, names.jobs_table)

    assert job["inputs"] == 300 and job["chunks"] == 2  # 256 inputs per request at most
    assert [e["line"] for e in job["errors"]] == [301, 302]
    assert "line 302" in job["errors"][1]["message"]
    stored = clients("dynamodb").get_item(
        TableName=names.jobs_table, Key={"tenant": {"S": "acme"}, "job_id": {"S": job["job_id"]}}
    )["Item"]
    assert stored["status"]["S"] == "queued"
    sqs = clients("sqs")
    batch_url = provisioned.queues["digits-cnn"]["batch"]
    received = sqs.receive_message(QueueUrl=batch_url, MaxNumberOfMessages=10)["Messages"]
    messages = [QueueMessage.model_validate_json(m["Body"]) for m in received]
    assert sorted(m.request_id for m in messages) == job["request_ids"]
    assert {m.lane for m in messages} == {"batch"} and {m.tenant for m in messages} == {"acme"}

    # A redelivered S3 event makes the same request ids: one result per chunk.
    (again,) = handle_event(event(names.batch_drop_bucket, key), adapters, names.jobs_table)
    assert again["request_ids"] == job["request_ids"]


def test_a_file_for_an_unknown_model_is_rejected_without_enqueuing(
    manifest, provisioned, clients, emulator_url
):
    names = manifest.names("dev")
    clients("s3").put_object(Bucket=names.batch_drop_bucket, Key="acme/nope/x.jsonl", Body=b"[1]")
    adapters = build_adapters(SplitterSettings(**provisioned.splitter_values()))
    assert (
        handle_event(
            event(names.batch_drop_bucket, "acme/nope/x.jsonl"), adapters, names.jobs_table
        )
        == []
    )
