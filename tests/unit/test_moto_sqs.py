"""The emulator's SQS fix changes how moto finds messages, never what SQS answers:
the same script of calls, run in-process on moto as it is and with the fix, gives
the same observable answers. With fair order on (as the emulator runs), only which
messages a receive picks while a message group is a noisy neighbour differs; the
rules that judge a group noisy are tested here on their own."""

from __future__ import annotations

import gc
import json
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from switchyard_local import moto_fair, moto_sqs

COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


def script() -> list[Any]:
    """Every observable answer of a run through sends, receives, deletes, visibility
    changes, redrive to a DLQ, purges, bad handles and a FIFO queue (times and
    generated ids and handles left out)."""
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
        handles = [m["ReceiptHandle"] for m in got]
        note("handles", all(len(h) == 185 and h.isalpha() and h.islower() for h in handles))
        note("distinct handles", len(set(handles)) == len(handles))
        return got

    def outcome(call: Any) -> None:
        try:
            answer = call()
        except ClientError as exc:
            note("error", (exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
        else:
            note("failed entries", answer.get("Failed"))

    def release(url: str, message: dict[str, Any], seconds: int = 0) -> Any:
        return sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=seconds
        )

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
    # Deleting again is no error; a handle never issued is.
    outcome(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"]))
    outcome(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="bogus"))
    outcome(
        lambda: sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": "bogus"}]
        )
    )
    outcome(lambda: release(url, {"ReceiptHandle": "bogus"}))
    outcome(lambda: release(url, first[0]))  # a deleted message's handle
    outcome(lambda: release(url, first[5], 43200))  # past 12 hours from its sending
    outcome(
        lambda: sqs.change_message_visibility_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "a", "ReceiptHandle": first[6]["ReceiptHandle"], "VisibilityTimeout": 5},
                {"Id": "b", "ReceiptHandle": "bogus", "VisibilityTimeout": 5},
            ],
        )
    )
    for m in first[5:]:  # released: they come back, with a second receive count
        release(url, m)
    note("attrs", attrs(url))
    again = recv(url, 10)
    # An old handle of a message received again still deletes it, as in moto.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[5]["ReceiptHandle"])
    note("attrs", attrs(url))
    for m in again:
        outcome(lambda m=m: release(url, m))
    # The third receive of the released ones sends them to the DLQ.
    while recv(url, 10):
        pass
    note("attrs", attrs(url))
    note("dlq attrs", attrs(dlq))
    dead = recv(dlq, 10)
    # A handle from the source queue: no longer there, still good in the DLQ.
    outcome(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=again[1]["ReceiptHandle"]))
    outcome(lambda: sqs.delete_message(QueueUrl=dlq, ReceiptHandle=again[1]["ReceiptHandle"]))
    outcome(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=dead[0]["ReceiptHandle"]))
    sqs.purge_queue(QueueUrl=dlq)
    # (Fair order sends fewer messages to the DLQ here: two or more, in either case.)
    outcome(lambda: sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead[1]["ReceiptHandle"]))
    outcome(lambda: release(dlq, dead[-1]))
    note("dlq attrs", attrs(dlq))
    note(
        "all", sorted(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])
    )
    outcome(lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"]))

    fifo = sqs.create_queue(
        QueueName="work.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for i in range(8):  # bodies repeat: content-based deduplication drops the repeats
        sqs.send_message(QueueUrl=fifo, MessageBody=f"f{i % 5}", MessageGroupId=f"g{i % 2}")
    note("fifo attrs", attrs(fifo))
    got = recv(fifo, 2)
    note("fifo attrs", attrs(fifo))
    sqs.delete_message(QueueUrl=fifo, ReceiptHandle=got[0]["ReceiptHandle"])
    release(fifo, got[1])
    while got := recv(fifo, 3):
        for m in got:
            sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    note("fifo attrs", attrs(fifo))

    # Message attributes: a receive hands out a copy of the message, filtered to
    # the attributes asked for; the message itself keeps them all.
    tagged = sqs.create_queue(QueueName="tagged")["QueueUrl"]
    attributes = {
        "kind": {"DataType": "String", "StringValue": "claim-check"},
        "size": {"DataType": "Number", "StringValue": "3"},
    }
    sqs.send_message(QueueUrl=tagged, MessageBody="t", MessageAttributes=attributes)
    for asked in (["kind"], [], ["All"]):
        got = sqs.receive_message(
            QueueUrl=tagged, MessageAttributeNames=asked, VisibilityTimeout=0
        ).get("Messages", [])
        note("tagged", [(m["Body"], m.get("MessageAttributes")) for m in got])

    # A message past its queue's retention period is not handed out.
    brief = sqs.create_queue(QueueName="brief", Attributes={"MessageRetentionPeriod": "1"})
    sqs.send_message(QueueUrl=brief["QueueUrl"], MessageBody="old")
    time.sleep(1.1)
    note("past retention", sqs.receive_message(QueueUrl=brief["QueueUrl"]).get("Messages", []))
    return seen


@pytest.fixture
def credentials(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


@pytest.fixture
def patched(credentials) -> Iterator[None]:
    moto_sqs.apply()
    try:
        yield
    finally:
        moto_sqs.undo()


def run_script() -> list[Any]:
    with mock_aws():
        return script()


def script_answers(fair: bool | None) -> list[Any]:
    """The script's answers from moto as it is (None), or with the fix, its fair
    order on or off."""
    moto_sqs.undo()
    if fair is None:
        return run_script()
    moto_sqs.apply(fair=fair)
    try:
        return run_script()
    finally:
        moto_sqs.undo()


def test_the_fix_answers_as_moto_does(credentials):
    # GIVEN the script's answers from moto as it is
    plain = script_answers(fair=None)
    # WHEN it runs again with the fix, in moto's order
    fixed = script_answers(fair=False)
    # THEN every answer is the same
    assert fixed == plain
    # AND the script did reach the paths it is meant to: errors, the DLQ, FIFO
    labels = [label for label, _ in plain]
    assert labels.count("error") >= 6 and ("dlq attrs", {}) not in plain
    assert ("fifo attrs", dict(zip(COUNTS, ["5", "0", "0"], strict=True))) in plain


def received_bodies(answers: list[Any]) -> set[str]:
    return {m[0] for label, got in answers if label == "received" for m in got}


def test_with_fair_order_only_which_messages_a_receive_picks_differs(credentials):
    """Fair order changes which visible messages a receive hands out once a group is
    a noisy neighbour, and so, downstream, which messages are received how often
    (and reach the DLQ). It leaves alone everything before that, every error, the
    FIFO queue, and that every message is delivered."""
    # GIVEN the script's answers from moto as it is
    plain = script_answers(fair=None)
    # WHEN it runs again with the fix, in fair order, as the emulator runs
    fair = script_answers(fair=True)
    # THEN the same calls were answered, each with the same kind of answer
    assert [label for label, _ in fair] == [label for label, _ in plain]
    # AND every answer is the same up to the second receive: "acme" then held 4 of the
    # 10 messages received (its share of processing time over 10%: noisy), each
    # message without a group being a tenant of its own (quiet)
    split = next(i for i, (a, b) in enumerate(zip(plain, fair, strict=True)) if a != b)
    assert fair[:split] == plain[:split]
    label, picked = fair[split]
    assert label == "received" and len(picked) == len(plain[split][1]) == 10
    # AND that receive handed out the quiet messages first: none of acme's, where moto
    # gave the first ten in queue order
    assert {group for _, _, group in plain[split][1]} == {None, "acme"}
    assert {group for _, _, group in picked} == {None}
    # AND every error is the same, every message of the standard queue was delivered
    # (all but the one delayed a minute), and the FIFO queue's answers, from its first
    # count on, are all the same
    assert [a for a in fair if a[0] == "error"] == [a for a in plain if a[0] == "error"]
    fifo = [label for label, _ in plain].index("fifo attrs")
    sent = {*(f"m{i}" for i in range(25)), *(f"b{i}" for i in range(10))}
    assert received_bodies(fair[:fifo]) == received_bodies(plain[:fifo]) == sent
    assert fair[fifo:] == plain[fifo:]


# -- the rules that judge a group noisy (switchyard_local.moto_fair) ---------------------

NOW_MS = 1_000_000.0


@dataclass(eq=False)
class FakeMessage:
    """What the rules read of a message: its group, when it becomes visible again,
    when its current receive began."""

    group_id: str | None
    visible_at: float = NOW_MS + 30_000
    _sy_taken: float | None = NOW_MS


@dataclass
class FakeQueue:
    _pending_messages: set[FakeMessage] = field(default_factory=set)


def in_flight(queue: FakeQueue, group: str | None, n: int, received_ms_ago: float = 0) -> None:
    queue._pending_messages.update(
        FakeMessage(group, _sy_taken=NOW_MS - received_ms_ago) for _ in range(n)
    )


def processed(queue: FakeQueue, group: str | None, ms: float, at: float = NOW_MS) -> None:
    """A receive of ``group`` that ended (deleted) at ``at``, ``ms`` after it began."""
    moto_fair.settled(queue, FakeMessage(group, visible_at=at, _sy_taken=at - ms), at)


def test_a_group_is_noisy_with_over_10_percent_of_the_messages_in_flight_and_30(credentials):
    # GIVEN queues whose messages were all received just now (no processing time yet)
    cases = {}
    for a, others in ((31, 269), (30, 270), (29, 0), (40, 0)):
        queue = FakeQueue()
        in_flight(queue, "a", a)
        in_flight(queue, None, others)  # each a tenant of its own
        # WHEN each is judged
        judged = moto_fair.assess(queue, NOW_MS)
        cases[(a, a + others)] = judged.noisy
        assert judged.in_flight["a"] == a
    # THEN a group is noisy over 10% of the in-flight messages and with at least 30
    assert cases == {
        (31, 300): {"a"},
        (30, 300): set(),  # exactly 10%
        (29, 29): set(),  # all of them, but fewer than 30
        (40, 40): {"a"},
    }


def test_a_group_is_noisy_with_over_10_percent_of_the_recent_processing_time(credentials):
    # GIVEN a queue whose receives took 11% of the processing time for group a, 10%
    # for b, 79% for messages without a group (each a tenant of its own)
    queue = FakeQueue()
    processed(queue, "a", 110)
    processed(queue, "b", 100)
    for _ in range(79):
        processed(queue, None, 10)
    # WHEN it is judged
    judged = moto_fair.assess(queue, NOW_MS)
    # THEN only a is noisy
    assert judged.noisy == {"a"}
    assert judged.processing_ms == pytest.approx({"a": 110, "b": 100})


def test_processing_time_counts_the_messages_in_flight_so_far(credentials):
    # GIVEN group a with 5 messages in flight for 2 s, b with 20 received just now
    queue = FakeQueue()
    in_flight(queue, "a", 5, received_ms_ago=2000)
    in_flight(queue, "b", 20)
    # WHEN it is judged
    judged = moto_fair.assess(queue, NOW_MS)
    # THEN a, holding all the processing time so far, is noisy; b, with none, is not
    assert judged.noisy == {"a"} and judged.processing_ms["a"] == pytest.approx(10_000)


def test_recent_processing_time_halves_every_half_life(credentials):
    # GIVEN 1,000 ms of a's processing, one half-life ago
    queue = FakeQueue()
    before = NOW_MS - moto_fair.HALF_LIFE_S * 1000
    processed(queue, "a", 1000, at=before)
    # WHEN it is judged now
    judged = moto_fair.assess(queue, NOW_MS)
    # THEN half of it counts
    assert judged.processing_ms == pytest.approx({"a": 500})


def test_a_receive_that_ends_late_counts_only_until_its_message_was_visible_again(
    credentials,
):
    # GIVEN a message of a received 10 s ago with a 2 s visibility timeout, never
    # deleted, received again now
    queue = FakeQueue()
    message = FakeMessage("a", visible_at=NOW_MS - 8000, _sy_taken=NOW_MS - 10_000)
    moto_fair.received(queue, message, NOW_MS)
    # WHEN the queue is judged
    judged = moto_fair.assess(queue, NOW_MS)
    # THEN the first receive counted 2 s, and the new one is under way
    assert judged.processing_ms == pytest.approx({"a": 2000})
    assert message._sy_taken == NOW_MS


def test_apply_is_idempotent_and_undo_puts_moto_back():
    from moto.sqs.models import Message, Queue, SQSBackend

    # GIVEN moto's own code
    moto_sqs.undo()
    from moto.sqs import models

    own = (Queue.__dict__["messages"], SQSBackend.receive_message, Message.__new__)
    own_handle = models.generate_receipt_handle
    # WHEN the fix is applied twice, then undone once
    moto_sqs.apply()
    moto_sqs.apply()
    applied = (Queue.__dict__["messages"], SQSBackend.receive_message, Message.__new__)
    assert models.generate_receipt_handle is not own_handle
    moto_sqs.undo()
    # THEN it was in force, and moto's code is back
    assert all(a is not o for a, o in zip(applied, own, strict=True))
    assert (Queue.__dict__["messages"], SQSBackend.receive_message, Message.__new__) == own
    assert "__new__" not in Message.__dict__
    assert models.generate_receipt_handle is own_handle


def test_the_fix_refuses_a_moto_it_was_not_written_for(monkeypatch):
    from importlib import metadata

    # GIVEN another moto version installed
    monkeypatch.setattr(metadata, "version", lambda name: "9.9.9")
    moto_sqs.undo()
    # WHEN the fix is applied THEN it refuses, naming the version
    with pytest.raises(moto_sqs.UnsupportedMoto, match="9.9.9"):
        moto_sqs.apply()


def test_messages_are_freed_once_deleted_from_their_queue_or_its_dlq(patched):
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import Message, sqs_backends

    with mock_aws():
        # GIVEN a queue that moves a message to its DLQ on its second receive
        sqs = boto3.client("sqs", region_name="us-east-1")
        dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
        policy = json.dumps({"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": 1})
        url = sqs.create_queue(QueueName="q", Attributes={"RedrivePolicy": policy})["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="done")
        sqs.send_message(QueueUrl=url, MessageBody="poison")
        queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues["q"]
        refs = [weakref.ref(m) for m in queue._messages]
        # WHEN one is deleted, the other moves to the DLQ and is deleted there
        done, poison = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=done["ReceiptHandle"])
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=poison["ReceiptHandle"], VisibilityTimeout=0
        )
        assert "Messages" not in sqs.receive_message(QueueUrl=url)
        (dead,) = sqs.receive_message(QueueUrl=dlq)["Messages"]
        sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"])
        gc.collect()
        # THEN neither message, nor any copy of one, is still held
        assert dead["Body"] == "poison"
        assert [ref() for ref in refs] == [None, None]
        assert Message.instances_tracked == []
