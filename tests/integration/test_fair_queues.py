"""SQS fair queues on the local emulator, over the wire: a standard queue serves
message groups as AWS documents for fair queues (``switchyard_local.moto_fair``).
A group that holds more than 10% of the queue's in-flight messages and at least 30
of them, or more than 10% of its recent processing time, is a noisy neighbour: the
other groups' messages are handed out before its backlog, and its own still come
when nothing else waits. Visibility, receive counts, redrive and long polls are
SQS's as before; FIFO queues keep their order."""

from __future__ import annotations

import threading
import time

from tests.integration.test_local_sqs import COUNTS, make_queue


def send(sqs, url: str, group: str, n: int, first: int = 0) -> list[str]:
    """``n`` messages of ``group``, bodies ``<group><i>``, in batches of ten."""
    bodies = [f"{group}{i}" for i in range(first, first + n)]
    for start in range(0, n, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": body, "MessageGroupId": group}
                for i, body in enumerate(bodies[start : start + 10])
            ],
        )
    return bodies


def receive(
    sqs, url: str, count: int = 10, wait: int = 0, visibility: int | None = None
) -> list[dict]:
    extra = {} if visibility is None else {"VisibilityTimeout": visibility}
    return sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=count,
        WaitTimeSeconds=wait,
        MessageSystemAttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
        **extra,
    ).get("Messages", [])


def hold(sqs, url: str, n: int) -> list[dict]:
    """Receive ``n`` messages and keep them in flight."""
    held: list[dict] = []
    while len(held) < n:
        got = receive(sqs, url, min(10, n - len(held)))
        assert got, f"only {len(held)} of {n} messages to hold"
        held += got
    return held


def delete(sqs, url: str, messages: list[dict]) -> None:
    if messages:
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


def groups(messages: list[dict]) -> list[str]:
    return [m["Attributes"]["MessageGroupId"] for m in messages]


def bodies(messages: list[dict]) -> list[str]:
    return [m["Body"] for m in messages]


def counts(sqs, url: str) -> tuple[int, int]:
    """(visible, in flight)"""
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
    return int(attrs[COUNTS[0]]), int(attrs[COUNTS[1]])


def test_a_quiet_groups_message_is_not_held_behind_a_noisy_backlog(sqs):
    # GIVEN tenant a's backlog of 500 messages, 40 of them in flight
    url = make_queue(sqs, "fair-backlog")
    send(sqs, url, "a", 500)
    in_flight = hold(sqs, url, 40)
    # AND then one message of tenant b, sent behind all of it
    send(sqs, url, "b", 1)
    # WHEN the next receive asks for ten
    got = receive(sqs, url)
    # THEN b's message comes first, then a's next nine, oldest first: a's backlog is
    # served after it, not dropped or throttled
    assert bodies(in_flight) == [f"a{i}" for i in range(40)]
    assert bodies(got) == ["b0"] + [f"a{i}" for i in range(40, 49)]
    assert counts(sqs, url) == (451, 50)


def test_a_consumer_that_holds_few_messages_still_gets_the_quiet_tenant_first(sqs):
    # GIVEN one consumer working through tenant a's backlog ten at a time, deleting
    # each batch before the next (a never holds the 30 in flight of the concurrency
    # rule, but holds all of the recent processing time)
    url = make_queue(sqs, "fair-one-consumer")
    send(sqs, url, "a", 500)
    for _ in range(3):
        batch = receive(sqs, url)
        time.sleep(0.01)  # the work
        delete(sqs, url, batch)
    # AND a message of tenant b sent behind the rest of a's backlog
    send(sqs, url, "b", 1)
    # WHEN the consumer receives again
    got = receive(sqs, url)
    # THEN b's message comes first
    assert bodies(got) == ["b0"] + [f"a{i}" for i in range(30, 39)]


def test_without_a_noisy_group_messages_come_in_the_order_sent(sqs):
    # GIVEN two tenants' messages interleaved, none received yet
    url = make_queue(sqs, "fair-calm")
    sent = []
    for i in range(10):
        sent += send(sqs, url, "b" if i % 3 == 0 else "a", 1, first=i)
    # WHEN they are received
    got = receive(sqs, url)
    # THEN they come in the order sent
    assert bodies(got) == sent
    delete(sqs, url, got)


def test_while_consumers_keep_up_each_receive_gets_the_message_just_sent(sqs):
    # GIVEN a queue drained as fast as messages arrive: no backlog
    url = make_queue(sqs, "fair-no-backlog")
    for i in range(6):
        # WHEN a tenant sends one message and the consumer receives
        (body,) = send(sqs, url, "a" if i % 2 else "b", 1, first=i)
        got = receive(sqs, url)
        # THEN it gets that message, whichever tenant sent it
        assert bodies(got) == [body]
        delete(sqs, url, got)


def test_of_several_noisy_groups_the_one_with_fewest_in_flight_comes_first(sqs):
    # GIVEN tenants a and c each with a backlog, a holding 40 in flight and c 32 (both
    # noisy: more than 10% of the queue's in-flight messages, and at least 30)
    url = make_queue(sqs, "fair-two-noisy")
    send(sqs, url, "a", 100)
    hold(sqs, url, 40)
    send(sqs, url, "c", 100)
    assert set(groups(hold(sqs, url, 32))) == {"c"}  # a is noisy: c's come first
    # WHEN the next receive asks for ten
    got = receive(sqs, url)
    # THEN c's come first, until c holds as many as a; then a's too (c, with less
    # processing time behind it, wins the tie once)
    assert groups(got) == ["c"] * 9 + ["a"]
    assert bodies(got) == [f"c{i}" for i in range(32, 41)] + ["a40"]


def test_redelivery_receive_counts_and_redrive_hold_while_a_group_is_noisy(sqs):
    # GIVEN a queue that gives up on a message after two receives, tenant a noisy (40
    # in flight, more behind them) and one message of tenant b
    url = make_queue(sqs, "fair-redrive", visibility=30, max_receives=2)
    dlq = sqs.get_queue_url(QueueName="fair-redrive-dlq")["QueueUrl"]
    send(sqs, url, "a", 60)
    hold(sqs, url, 40)
    send(sqs, url, "b", 1)
    # WHEN b's message is received with a 1 s visibility timeout and not deleted
    (first,) = receive(sqs, url, count=1, visibility=1)
    meanwhile = receive(sqs, url, count=1)
    time.sleep(1.3)
    (second,) = receive(sqs, url, count=1, visibility=1)
    # THEN it is invisible while in flight, and comes back after its timeout, ahead of
    # a's backlog, counted as a second receive, with a new handle
    assert (first["Body"], first["Attributes"]["ApproximateReceiveCount"]) == ("b0", "1")
    assert bodies(meanwhile) == ["a40"]
    assert (second["Body"], second["Attributes"]["ApproximateReceiveCount"]) == ("b0", "2")
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # WHEN its timeout passes again and the queue is received from
    time.sleep(1.3)
    third = receive(sqs, url, count=1)
    # THEN it is over maxReceiveCount: it moves to the DLQ, and a's next comes instead
    assert bodies(third) == ["a41"]
    (dead,) = receive(sqs, dlq)
    assert dead["MessageId"] == first["MessageId"]
    assert counts(sqs, url) == (18, 42)
    # AND a message released at once comes back at once, its receive count raised
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=third[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    assert counts(sqs, url) == (19, 41)
    (again,) = receive(sqs, url, count=1)
    assert (again["Body"], again["Attributes"]["ApproximateReceiveCount"]) == ("a41", "2")


def test_a_long_poll_hands_out_a_quiet_message_as_it_arrives(sqs):
    # GIVEN tenant a's messages all in flight: nothing visible
    url = make_queue(sqs, "fair-long-poll")
    send(sqs, url, "a", 40)
    hold(sqs, url, 40)
    # WHEN tenant b sends 0.5 s into a 10 s long poll
    timer = threading.Timer(0.5, lambda: send(sqs, url, "b", 1))
    timer.start()
    began = time.monotonic()
    try:
        got = receive(sqs, url, wait=10)
    finally:
        timer.cancel()
    # THEN the poll returns b's message soon after it is sent
    assert bodies(got) == ["b0"] and time.monotonic() - began < 5


def test_a_fifo_queue_keeps_its_order(sqs):
    # GIVEN a FIFO queue where tenant a's first messages were received and deleted
    url = sqs.create_queue(
        QueueName="fair-order.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for i in range(5):
        sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageGroupId="a")
    first = receive(sqs, url, count=2)
    delete(sqs, url, first)
    # AND then a message of tenant b
    sqs.send_message(QueueUrl=url, MessageBody="b0", MessageGroupId="b")
    # WHEN the queue is received from
    got = receive(sqs, url)
    # THEN the messages come in the order sent: fairness is for standard queues
    assert bodies(first) == ["a0", "a1"]
    assert bodies(got) == ["a2", "a3", "a4", "b0"]
