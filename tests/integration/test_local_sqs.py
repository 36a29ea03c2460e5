"""The SQS behaviour the platform relies on, on the local emulator as the local
platform starts it (``switchyard_local.emulator``: moto with
``switchyard_local.moto_sqs`` applied), over the wire."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from urllib.parse import unquote_plus

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto.sqs.exceptions import ReceiptHandleIsInvalid

COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


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
    """(visible, in flight)"""
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
    return int(attrs[COUNTS[0]]), int(attrs[COUNTS[1]])


def send(sqs, url: str, n: int, group: str | None = None, prefix: str = "m") -> list[str]:
    extra = {"MessageGroupId": group} if group else {}
    return [
        sqs.send_message(QueueUrl=url, MessageBody=f"{prefix}{i}", **extra)["MessageId"]
        for i in range(n)
    ]


def delete_batch(sqs, url: str, messages: list[dict]) -> dict:
    return sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ],
    )


def test_a_message_not_deleted_comes_back_after_its_visibility_timeout(sqs):
    # GIVEN a message received once, on a queue with a 1 s visibility timeout
    url = make_queue(sqs, "redeliver", visibility=1)
    send(sqs, url, 1)
    (first,) = receive(sqs, url)
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    # WHEN it is not deleted: invisible while in flight, then the timeout passes
    in_flight = receive(sqs, url)
    time.sleep(1.3)
    (again,) = receive(sqs, url)
    # THEN it comes back, counted as a second receive, with a new receipt handle
    assert in_flight == []
    assert again["MessageId"] == first["MessageId"] and again["Body"] == "m0"
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert again["ReceiptHandle"] != first["ReceiptHandle"]


def test_a_deleted_message_never_comes_back(sqs):
    # GIVEN three messages received, on a queue with a 1 s visibility timeout
    url = make_queue(sqs, "delete", visibility=1)
    send(sqs, url, 3)
    got = receive(sqs, url)
    # WHEN one is deleted alone and two in a batch, and the timeout passes
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    result = delete_batch(sqs, url, got[1:])
    time.sleep(1.3)
    # THEN none comes back and the queue is empty
    assert len(result["Successful"]) == 2 and not result.get("Failed")
    assert receive(sqs, url) == [] and counts(sqs, url) == (0, 0)
    # AND deleting one again is no error, as in SQS
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])


def test_an_invalid_receipt_handle_is_refused_as_moto_refuses_it(sqs):
    # GIVEN a queue with a message in flight
    url = make_queue(sqs, "invalid")
    send(sqs, url, 1)
    receive(sqs, url)
    moto_says = ReceiptHandleIsInvalid()
    # WHEN a handle it never issued is used to delete and to change visibility
    with pytest.raises(ClientError) as deleting:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    with pytest.raises(ClientError) as changing:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="nope", VisibilityTimeout=0)
    batch = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "x"}])
    # THEN each is refused with moto's own error
    for caught in (deleting, changing):
        error = caught.value.response["Error"]
        assert (error["Code"], error["Message"]) == (moto_says.code, moto_says.message)
    assert batch["Failed"][0]["Code"] == moto_says.code and not batch.get("Successful")
    assert counts(sqs, url) == (0, 1)


def test_a_message_moves_to_the_dlq_after_max_receives(sqs):
    # GIVEN a queue that gives up on a message after two receives
    url = make_queue(sqs, "poison", visibility=30, max_receives=2)
    dlq = sqs.get_queue_url(QueueName="poison-dlq")["QueueUrl"]
    (message_id,) = send(sqs, url, 1)
    # WHEN the message is received and released twice
    receive_counts = []
    for _ in range(2):
        (m,) = receive(sqs, url)
        receive_counts.append(m["Attributes"]["ApproximateReceiveCount"])
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    # THEN the third receive finds it over maxReceiveCount: it is in the DLQ instead
    assert receive_counts == ["1", "2"]
    assert receive(sqs, url) == [] and counts(sqs, url) == (0, 0)
    (dead,) = receive(sqs, dlq)
    assert dead["MessageId"] == message_id
    # AND the source queue's last handle no longer finds it there
    with pytest.raises(ClientError, match="ReceiptHandleIsInvalid"):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"])
    assert counts(sqs, dlq) == (0, 0)


def test_change_visibility_holds_a_message_longer_or_releases_it_at_once(sqs):
    # GIVEN two messages in flight on a queue with a 1 s visibility timeout
    url = make_queue(sqs, "visibility", visibility=1)
    send(sqs, url, 2)
    a, b = receive(sqs, url)
    # WHEN both are held for 30 s, one alone and one in a batch, past the queue's timeout
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=a["ReceiptHandle"], VisibilityTimeout=30
    )
    held = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "b", "ReceiptHandle": b["ReceiptHandle"], "VisibilityTimeout": 30}],
    )
    time.sleep(1.3)
    # THEN neither comes back
    assert [e["Id"] for e in held["Successful"]] == ["b"]
    assert receive(sqs, url) == [] and counts(sqs, url) == (0, 2)
    # WHEN they are released (0 s), one alone and one in a batch
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=a["ReceiptHandle"], VisibilityTimeout=0
    )
    after_one = counts(sqs, url)
    released = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "b", "ReceiptHandle": b["ReceiptHandle"], "VisibilityTimeout": 0}],
    )
    # THEN each is visible at once, and comes back on its second receive
    assert after_one == (1, 1) and [e["Id"] for e in released["Successful"]] == ["b"]
    assert counts(sqs, url) == (2, 0)
    again = receive(sqs, url)
    assert sorted(m["MessageId"] for m in again) == sorted([a["MessageId"], b["MessageId"]])
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"2"}


def test_a_long_poll_returns_when_a_message_arrives(sqs):
    # GIVEN an empty queue, a message sent into it 0.5 s into a 20 s long poll, and
    # another sent 10 s into it
    url = make_queue(sqs, "long-poll")
    second_sent = threading.Event()

    def send_second() -> None:
        second_sent.set()
        send(sqs, url, 1, prefix="second")

    timers = [
        threading.Timer(0.5, lambda: send(sqs, url, 1, prefix="first")),
        threading.Timer(10, send_second),
    ]
    for timer in timers:
        timer.start()
    try:
        # WHEN the poll is made
        got = receive(sqs, url, wait=20)
        returned_before_the_second = not second_sent.is_set()
    finally:
        for timer in timers:
            timer.cancel()
            timer.join()
    # THEN it returns the first message, before the second was even sent
    assert [m["Body"] for m in got] == ["first0"]
    assert returned_before_the_second


def test_a_long_poll_on_an_empty_queue_waits_its_whole_time(sqs):
    # GIVEN an empty queue
    url = make_queue(sqs, "long-poll-empty")
    # WHEN a 2 s long poll is made and nothing arrives
    started = time.monotonic()
    got = receive(sqs, url, wait=2)
    waited = time.monotonic() - started
    # THEN it answers empty once its time is up, not at once (a lower bound on a
    # wait the server must make, not a measure of speed)
    assert got == [] and waited >= 1.9


def test_counts_of_visible_and_in_flight_messages(sqs):
    # GIVEN 25 messages queued
    url = make_queue(sqs, "counts")
    send(sqs, url, 25)
    before = counts(sqs, url)
    # WHEN 10 are received and 4 of those deleted
    got = receive(sqs, url, 10)
    in_flight = counts(sqs, url)
    delete_batch(sqs, url, got[:4])
    # THEN the counts follow: visible, and in flight (received, not deleted)
    assert before == (25, 0) and len(got) == 10 and in_flight == (15, 10)
    assert counts(sqs, url) == (15, 6)
    everything = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert everything["ApproximateNumberOfMessages"] == "15"
    assert everything["ApproximateNumberOfMessagesNotVisible"] == "6"
    assert everything["VisibilityTimeout"] == "30"


def test_receive_honours_the_count_asked_for_in_send_order(sqs):
    # GIVEN 30 messages sent one after another
    url = make_queue(sqs, "order")
    send(sqs, url, 30)
    # WHEN 7 are asked for, then 10
    first = [m["Body"] for m in receive(sqs, url, 7)]
    then = [m["Body"] for m in receive(sqs, url, 10)]
    # THEN that many come, oldest first (moto's order for a standard queue)
    assert first == [f"m{i}" for i in range(7)]
    assert then == [f"m{i}" for i in range(7, 17)]


def test_a_message_group_id_on_a_standard_queue_comes_back(sqs):
    # GIVEN two messages with a group id and one without, on a standard queue
    url = make_queue(sqs, "groups")
    send(sqs, url, 2, group="acme")
    send(sqs, url, 1)
    # WHEN they are received
    got = receive(sqs, url)
    # THEN each carries its group id, or none
    assert [m["Attributes"].get("MessageGroupId") for m in got] == ["acme", "acme", None]


def test_a_backlog_drains_completely_through_receive_and_delete(sqs):
    # GIVEN a backlog of 3,000 messages
    url = make_queue(sqs, "backlog")
    for start in range(0, 3000, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)],
        )
    queued = counts(sqs, url)
    # WHEN it is drained ten at a time
    seen: list[str] = []
    while got := receive(sqs, url):
        seen.extend(m["Body"] for m in got)
        delete_batch(sqs, url, got)
    # THEN every message came exactly once and nothing is left
    assert queued == (3000, 0)
    assert sorted(seen) == sorted(f"m{i}" for i in range(3000))
    assert counts(sqs, url) == (0, 0)


def test_the_emulator_holds_no_sqs_message_objects_after_their_deletion(sqs, emulator_url):
    """The SQS fix is in force in the emulator's process: moto as it is keeps every
    message, and every copy a receive makes, for its dashboard (``/moto-api/``) for
    the life of the process; the fixed emulator frees a message once it is deleted."""
    # GIVEN messages sent, received and deleted
    url = make_queue(sqs, "freed")
    send(sqs, url, 5)
    delete_batch(sqs, url, receive(sqs, url))
    # WHEN moto's dashboard data is read
    with urllib.request.urlopen(f"{emulator_url}/moto-api/data.json") as answer:  # noqa: S310
        data = json.load(answer)
    # THEN it lists the queue, and no message objects
    assert [q["name"] for q in data["sqs"]["Queue"]] == ["freed"]
    assert data["sqs"]["Message"] == []


def test_the_emulator_refuses_to_listen_beyond_loopback():
    # GIVEN the emulator's command line, with every interface asked for
    argv = [sys.executable, "-m", "switchyard_local.emulator", "-H", "0.0.0.0"]  # noqa: S104
    # WHEN it is started
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    # THEN it exits at once, saying why
    assert done.returncode != 0 and "loopback only" in done.stderr


def test_s3_object_created_notifications_reach_a_queue(clients, sqs):
    # GIVEN a bucket that notifies a queue of created objects
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
    # WHEN an object is put
    s3.put_object(Bucket="drop-bucket", Key="acme/minilm-embed/a file.jsonl", Body=b'"x"\n')
    # THEN its event is in the queue (moto URL-encodes the key, as S3 does)
    records = [
        r for m in receive(sqs, url, wait=5) for r in json.loads(m["Body"]).get("Records", [])
    ]
    assert [unquote_plus(r["s3"]["object"]["key"]) for r in records] == [
        "acme/minilm-embed/a file.jsonl"
    ]
    assert records[0]["eventName"].startswith("ObjectCreated")


def test_a_client_connection_carries_one_call_after_another(clients, emulator_url):
    # GIVEN one HTTP connection to the emulator
    host, port = emulator_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)

    def signed() -> dict[str, str]:
        # as the operator signs it (the emulator may enforce IAM)
        request = AWSRequest(
            "POST",
            f"{emulator_url}/",
            data=b"{}",
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "DynamoDB_20120810.ListTables",
            },
        )
        credentials = Credentials(
            os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        )
        SigV4Auth(credentials, "dynamodb", "us-east-1").add_auth(request)
        return dict(request.headers.items())

    try:
        answers = []
        for _ in range(2):
            # WHEN a call is made on it
            connection.request("POST", "/", body=b"{}", headers=signed())
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read()), response.will_close))
            socket_after = connection.sock
            # THEN it is answered, and the connection stays open for the next call
            assert socket_after is not None
        assert answers == [(200, {"TableNames": []}, False)] * 2
    finally:
        connection.close()


def test_long_polls_waiting_leave_the_other_calls_answered(sqs):
    # GIVEN 40 long polls waiting on an empty queue (each holds a server thread)
    idle = make_queue(sqs, "idle")
    busy = make_queue(sqs, "busy")
    returned = threading.Event()

    def poll() -> None:
        receive(sqs, idle, wait=5)
        returned.set()

    polls = [threading.Thread(target=poll) for _ in range(40)]
    for thread in polls:
        thread.start()
    try:
        time.sleep(0.5)  # let them reach the server
        # WHEN other calls are made meanwhile
        send(sqs, busy, 3)
        got = receive(sqs, busy)
        delete_batch(sqs, busy, got)
        answered_while_polling = not returned.is_set()
    finally:
        for thread in polls:
            thread.join()
    # THEN they are answered while every poll still waits
    assert sorted(m["Body"] for m in got) == ["m0", "m1", "m2"]
    assert answered_while_polling
    assert counts(sqs, busy) == (0, 0)
