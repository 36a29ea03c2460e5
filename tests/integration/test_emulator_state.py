"""The emulator keeps the platform's data from one run to the next: what the
provisioner made, what was written into it, and messages still queued come back
after a stop and a start with the same state file; a damaged file is set aside."""

from __future__ import annotations

import os

import pytest

from switchyard import aws
from switchyard_local.emulator import start_emulator
from switchyard_local.provision import provision

REGION = "us-east-1"


@pytest.fixture
def restart(tmp_path, manifest):
    """Start an emulator on the state file ``tmp_path/state``; each call stops the
    one running (which writes the state) and starts the next on the same file."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    running = []

    def start():
        if running:
            running.pop().stop()
        emulator = start_emulator(tmp_path / "emulator.log", state=tmp_path / "state")
        running.append(emulator)
        aws.reset_clients()
        return lambda service: aws.client(service, REGION, emulator.url)

    yield start
    for emulator in running:
        emulator.stop()


def test_data_and_queued_messages_survive_a_restart(restart, manifest, tmp_path):
    clients = restart()
    made = provision(manifest, "dev", clients("s3").meta.endpoint_url, REGION)
    names = made.names
    model = next(iter(manifest.models))
    clients("s3").put_object(Bucket=names.artifacts_bucket, Key="a/b.pt", Body=b"weights")
    key = {"tenant": {"S": "acme"}, "request_id": {"S": "r-1"}}
    clients("dynamodb").put_item(
        TableName=names.results_table, Item={**key, "status": {"S": "done"}}
    )
    sqs = clients("sqs")
    queue = made.queues[model]["realtime"]
    sqs.send_message(QueueUrl=queue, MessageBody="queued")
    sqs.send_message(QueueUrl=queue, MessageBody="in flight")
    taken = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1, VisibilityTimeout=1)
    assert len(taken["Messages"]) == 1

    clients = restart()
    assert "state restored" in (tmp_path / "emulator.log").read_text()
    body = clients("s3").get_object(Bucket=names.artifacts_bucket, Key="a/b.pt")["Body"].read()
    assert body == b"weights"
    item = clients("dynamodb").get_item(TableName=names.results_table, Key=key)
    assert item["Item"]["status"] == {"S": "done"}
    # both messages: the one never received, and the one whose visibility ran out
    sqs = clients("sqs")
    bodies = []
    for _ in range(10):
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for message in got.get("Messages", []):
            bodies.append(message["Body"])
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        if len(bodies) == 2:
            break
    assert sorted(bodies) == ["in flight", "queued"]
    # a delete through the rebuilt index took them: nothing comes back
    assert sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2).get("Messages") is None
    keys = clients("apigateway").get_api_keys(includeValues=True)["items"]
    assert sorted(k["value"] for k in keys) == sorted(made.api_keys.values())


def test_a_second_provisioning_over_restored_state_keeps_it(restart, manifest):
    clients = restart()
    first = provision(manifest, "dev", clients("s3").meta.endpoint_url, REGION)
    bucket = first.names.artifacts_bucket
    clients("s3").put_object(Bucket=bucket, Key="a/b.pt", Body=b"weights")
    clients = restart()
    second = provision(manifest, "dev", clients("s3").meta.endpoint_url, REGION)
    # the buckets are found, not made again empty in place of the kept ones
    assert clients("s3").get_object(Bucket=bucket, Key="a/b.pt")["Body"].read() == b"weights"
    # the same resources, found rather than made twice: keys, queues, routing
    assert second.api_keys == first.api_keys
    assert _paths(second.queues) == _paths(first.queues)  # a new port, the same queues
    assert second.appconfig_application_id == first.appconfig_application_id
    apps = clients("appconfig").list_applications()["Items"]
    assert len(apps) == 1
    assert len(clients("apigateway").get_rest_apis()["items"]) == 1


def _paths(queues):
    return {
        m: {lane: url.split("/", 3)[3] for lane, url in lanes.items()}
        for m, lanes in queues.items()
    }


def test_an_unreadable_state_file_is_set_aside_and_the_emulator_starts_empty(restart, tmp_path):
    (tmp_path / "state").write_bytes(b"not a saved state")
    clients = restart()
    assert clients("sqs").list_queues().get("QueueUrls") is None
    assert (tmp_path / "state.unreadable").read_bytes() == b"not a saved state"
    assert "unreadable" in (tmp_path / "emulator.log").read_text()
