"""The SQS behaviour the platform relies on, on the local emulator as the local
platform starts it (moto with ``switchyard_local.moto_sqs`` applied), over the wire."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import unquote_plus

import pytest
from botocore.exceptions import ClientError

COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


@pytest.fixture
def sqs(clients):
    return clients("sqs")


def make_queue(sqs, name: str, visibility: int = 30, max_receives: int | None = None) -> str:
    attributes = {"VisibilityTimeout": str(visibility)}
    if max_receives is not None:
        dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": max_receives}
        )
    return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def receive(sqs, url: str, count: int = 10, wait: int = 0) -> list[dict]:
    return sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=count,
        WaitTimeSeconds=wait,
        MessageSystemAttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
    ).get("Messages", [])


def counts(sqs, url: str) -> tuple[int, int]:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
    return int(attrs[COUNTS[0]]), int(attrs[COUNTS[1]])


def send(sqs, url: str, n: int, group: str | None = None) -> list[str]:
    ids = []
    for i in range(n):
        extra = {"MessageGroupId": group} if group else {}
        ids.append(sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", **extra)["MessageId"])
    return ids


def test_a_message_not_deleted_comes_back_after_its_visibility_timeout(sqs):
    url = make_queue(sqs, "redeliver", visibility=1)
    send(sqs, url, 1)
    (first,) = receive(sqs, url)
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert receive(sqs, url) == []  # in flight: invisible
    time.sleep(1.3)
    (again,) = receive(sqs, url)
    assert again["MessageId"] == first["MessageId"] and again["Body"] == "m0"
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert again["ReceiptHandle"] != first["ReceiptHandle"]


def test_a_deleted_message_never_comes_back(sqs):
    url = make_queue(sqs, "delete", visibility=1)
    send(sqs, url, 3)
    got = receive(sqs, url)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    result = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[1:])
        ],
    )
    assert len(result["Successful"]) == 2 and not result.get("Failed")
    time.sleep(1.3)
    assert receive(sqs, url) == [] and counts(sqs, url) == (0, 0)
    # Deleting again is fine, as in SQS.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])


def test_an_invalid_receipt_handle_is_refused(sqs):
    url = make_queue(sqs, "invalid")
    send(sqs, url, 1)
    receive(sqs, url)
    with pytest.raises(ClientError) as caught:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert caught.value.response["Error"]["Code"] == "ReceiptHandleIsInvalid"
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="nope", VisibilityTimeout=0)
    assert caught.value.response["Error"]["Code"] == "ReceiptHandleIsInvalid"
    batch = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "x"}])
    assert batch["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"


def test_a_message_moves_to_the_dlq_after_max_receives(sqs):
    url = make_queue(sqs, "poison", visibility=1, max_receives=2)
    dlq = sqs.get_queue_url(QueueName="poison-dlq")["QueueUrl"]
    (message_id,) = send(sqs, url, 1)
    for expected in ("1", "2"):
        (m,) = receive(sqs, url)
        assert m["Attributes"]["ApproximateReceiveCount"] == expected
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    # The third receive finds it over maxReceiveCount: it goes to the DLQ instead.
    assert receive(sqs, url) == []
    (dead,) = receive(sqs, dlq)
    assert dead["MessageId"] == message_id
    assert counts(sqs, url) == (0, 0)
    # The old receipt handle of the source queue no longer deletes anything there.
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"])
    assert counts(sqs, dlq) == (0, 0)


def test_change_visibility_releases_at_once_or_holds_longer(sqs):
    url = make_queue(sqs, "visibility", visibility=30)
    send(sqs, url, 2)
    a, b = receive(sqs, url)
    assert counts(sqs, url) == (0, 2)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=a["ReceiptHandle"], VisibilityTimeout=0
    )
    assert counts(sqs, url) == (1, 1)
    (again,) = receive(sqs, url)
    assert again["MessageId"] == a["MessageId"]
    result = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": again["ReceiptHandle"], "VisibilityTimeout": 1},
            {"Id": "b", "ReceiptHandle": b["ReceiptHandle"], "VisibilityTimeout": 1},
        ],
    )
    assert sorted(e["Id"] for e in result["Successful"]) == ["a", "b"]
    assert receive(sqs, url) == []
    time.sleep(1.3)
    assert sorted(m["MessageId"] for m in receive(sqs, url)) == sorted(
        [a["MessageId"], b["MessageId"]]
    )


def test_a_long_poll_wakes_when_a_message_arrives_and_waits_its_time_when_none_does(sqs):
    url = make_queue(sqs, "long-poll")
    started = time.monotonic()
    assert receive(sqs, url, wait=1) == []
    assert time.monotonic() - started >= 0.9  # waited its whole second
    timer = threading.Timer(1.0, lambda: send(sqs, url, 1))
    timer.start()
    started = time.monotonic()
    got = receive(sqs, url, wait=10)
    waited = time.monotonic() - started
    timer.join()
    assert [m["Body"] for m in got] == ["m0"]
    assert waited < 9  # woke on the message, not at the end of the poll


def test_counts_of_visible_and_in_flight_messages(sqs):
    url = make_queue(sqs, "counts")
    send(sqs, url, 25)
    assert counts(sqs, url) == (25, 0)
    got = receive(sqs, url, 10)
    assert len(got) == 10 and counts(sqs, url) == (15, 10)
    sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[:4])
        ],
    )
    assert counts(sqs, url) == (15, 6)
    everything = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert everything["ApproximateNumberOfMessages"] == "15"
    assert everything["VisibilityTimeout"] == "30"


def test_receive_honours_the_count_asked_for_in_send_order(sqs):
    url = make_queue(sqs, "order")
    send(sqs, url, 30)
    bodies = [m["Body"] for m in receive(sqs, url, 7)]
    assert bodies == [f"m{i}" for i in range(7)]
    assert [m["Body"] for m in receive(sqs, url, 10)] == [f"m{i}" for i in range(7, 17)]


def test_a_message_group_id_on_a_standard_queue_comes_back(sqs):
    url = make_queue(sqs, "groups")
    send(sqs, url, 2, group="acme")
    send(sqs, url, 1)
    got = receive(sqs, url)
    assert [m["Attributes"].get("MessageGroupId") for m in got] == ["acme", "acme", None]


def test_a_backlog_drains_completely_through_receive_and_delete(sqs):
    # GIVEN a backlog (fast sends: SendMessageBatch)
    url = make_queue(sqs, "backlog")
    for start in range(0, 3000, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)],
        )
    assert counts(sqs, url) == (3000, 0)
    # WHEN it is drained ten at a time
    seen: set[str] = set()
    while got := receive(sqs, url):
        seen.update(m["Body"] for m in got)
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
    # THEN every message came exactly once and nothing is left
    assert len(seen) == 3000 and counts(sqs, url) == (0, 0)


def test_s3_object_created_notifications_reach_a_queue(clients, sqs):
    url = make_queue(sqs, "drops")
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    s3 = clients("s3")
    s3.create_bucket(Bucket="drop-bucket")
    s3.put_bucket_notification_configuration(
        Bucket="drop-bucket",
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn["QueueArn"], "Events": ["s3:ObjectCreated:*"]}]
        },
    )
    s3.put_object(Bucket="drop-bucket", Key="acme/minilm-embed/a file.jsonl", Body=b'"x"\n')
    records = [
        r for m in receive(sqs, url, wait=5) for r in json.loads(m["Body"]).get("Records", [])
    ]
    assert [unquote_plus(r["s3"]["object"]["key"]) for r in records] == [
        "acme/minilm-embed/a file.jsonl"
    ]
    assert records[0]["eventName"].startswith("ObjectCreated")
