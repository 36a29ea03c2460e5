"""The emulator's SQS fix changes how moto finds messages, never what SQS answers:
the same script of calls, run in-process on moto as it is and with the fix, gives
the same observable answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from switchyard_local import moto_sqs

COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


def script() -> list[Any]:
    """Every observable answer of a run through sends, receives, deletes, visibility
    changes, redrive to a DLQ, purges and bad handles (times and ids left out)."""
    sqs = boto3.client("sqs", region_name="us-east-1")
    seen: list[Any] = []

    def note(label: str, value: Any) -> None:
        seen.append((label, value))

    def attrs(url: str) -> dict[str, str]:
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
        return {k: got[k] for k in COUNTS}

    def recv(url: str, n: int = 10) -> list[dict[str, Any]]:
        got = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=n,
            MessageSystemAttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
        ).get("Messages", [])
        note(
            "received",
            [
                (
                    m["Body"],
                    m["Attributes"]["ApproximateReceiveCount"],
                    m["Attributes"].get("MessageGroupId"),
                )
                for m in got
            ],
        )
        return got

    def error(call: Any) -> None:
        try:
            call()
            note("no error", None)
        except ClientError as exc:
            note("error", exc.response["Error"]["Code"])

    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName="work",
        Attributes={
            "VisibilityTimeout": "30",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
        },
    )["QueueUrl"]
    for i in range(25):
        extra = {"MessageGroupId": "acme"} if i % 3 == 0 else {}
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", **extra)
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"b{i}"} for i in range(10)]
    )
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    note("attrs", attrs(url))

    first = recv(url, 10)
    note("attrs", attrs(url))
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(first[:5])
        ],
    )
    note("deleted", sorted(e["Id"] for e in deleted["Successful"]))
    error(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"]))
    error(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="bogus"))
    error(
        lambda: sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle="bogus", VisibilityTimeout=0
        )
    )
    for m in first[5:]:  # released: they come back, with a second receive count
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    note("attrs", attrs(url))
    again = recv(url, 10)
    # An old handle of a message received again still deletes it, as in moto.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[5]["ReceiptHandle"])
    note("attrs", attrs(url))
    for m in again:
        error(
            lambda m=m: sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )
        )
    # The third receive of the released ones sends them to the DLQ.
    while recv(url, 10):
        pass
    note("attrs", attrs(url))
    note("dlq attrs", attrs(dlq))
    dead = recv(dlq, 10)
    error(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=dead[0]["ReceiptHandle"]))
    sqs.purge_queue(QueueUrl=dlq)
    error(lambda: sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead[1]["ReceiptHandle"]))
    note("dlq attrs", attrs(dlq))
    note(
        "all", sorted(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])
    )
    return seen


@pytest.fixture
def patched_and_restored() -> Iterator[None]:
    moto_sqs.apply()
    try:
        yield
    finally:
        moto_sqs.undo()


def run() -> list[Any]:
    with mock_aws():
        return script()


def test_the_fix_answers_as_moto_does(monkeypatch, patched_and_restored):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    patched = run()
    moto_sqs.undo()
    plain = run()
    assert patched == plain
    # and the script did reach every path it is meant to
    labels = [label for label, _ in plain]
    assert labels.count("error") >= 4 and ("dlq attrs", {}) not in plain


def test_the_fix_refuses_a_moto_it_was_not_written_for(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: "9.9.9")
    moto_sqs.undo()
    with pytest.raises(moto_sqs.UnsupportedMoto, match="9.9.9"):
        moto_sqs.apply()


def test_messages_are_not_kept_after_they_are_deleted(monkeypatch, patched_and_restored):
    import gc
    import weakref

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import Message, sqs_backends

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="x")
        backend_queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues["q"]
        ref = weakref.ref(backend_queue._messages[0])
        (m,) = sqs.receive_message(QueueUrl=url)["Messages"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        gc.collect()
        assert ref() is None, "the deleted message is still referenced"
        assert Message.instances_tracked == []
