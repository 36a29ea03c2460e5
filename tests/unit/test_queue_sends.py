"""A queue's sends made at once by threads (switchyard.queues.SqsWorkQueue): in
SendMessageBatches SQS takes, each sender told of its own message's failure only.
The SQS client here is a stand-in recording its calls; the emulator's answers are
in tests/integration/test_results_and_queues.py."""

from __future__ import annotations

import threading
from typing import Any

from botocore.exceptions import ClientError

from switchyard.queues import SQS_BATCH_BYTES, SqsWorkQueue
from tests.unit.test_together import while_one_is_out


class Sqs:
    """Records each call; fails the batch entries whose bodies are named, and any
    batch holding a body named to break it."""

    def __init__(self, refused: set[str] = frozenset(), broken: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self._refused = refused
        self._broken = broken

    def send_message(self, QueueUrl: str, MessageBody: str, MessageGroupId: str) -> dict:
        self.calls.append(("SendMessage", [MessageBody]))
        return {}

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict:
        bodies = [e["MessageBody"] for e in Entries]
        self.calls.append(("SendMessageBatch", bodies))
        if self._broken & set(bodies):
            raise ConnectionError("the connection was reset")
        failed = [
            {"Id": e["Id"], "SenderFault": True, "Code": "InvalidMessageContents", "Message": "no"}
            for e in Entries
            if e["MessageBody"] in self._refused
        ]
        return {"Successful": [], "Failed": failed}


def test_sends_are_cut_into_batches_of_ten_within_the_byte_bound():
    sqs = Sqs()
    queue = SqsWorkQueue(sqs, "url", "realtime")
    large = "x" * (SQS_BATCH_BYTES // 2 + 1)  # two do not fit one batch
    sends = [(f"m{i}", "acme") for i in range(12)] + [(large, "acme")] * 3
    assert queue._send_all(sends) == [None] * 15
    assert [len(bodies) for _, bodies in sqs.calls] == [10, 3, 1, 1]
    assert [b for _, bodies in sqs.calls for b in bodies] == [s for s, _ in sends]


def test_only_the_senders_of_what_failed_are_told_so():
    # GIVEN a batch in which SQS fails one entry, and a batch that fails whole
    sqs = Sqs(refused={"m3"}, broken={"m12"})
    queue = SqsWorkQueue(sqs, "url", "realtime")
    failures = queue._send_all([(f"m{i}", "acme") for i in range(13)])
    # THEN the refused entry's sender gets the error its SendMessage would raise,
    # the broken batch's senders its error, and the rest nothing
    assert isinstance(failures[3], ClientError)
    assert failures[3].response["Error"]["Code"] == "InvalidMessageContents"
    assert all(isinstance(f, ConnectionError) for f in failures[10:])
    assert [f for i, f in enumerate(failures) if i != 3 and i < 10] == [None] * 9


def test_a_send_alone_is_a_send_message_and_a_sender_raises_its_own_failure():
    # GIVEN a queue whose first send is held on its way out
    class Held(Sqs):
        def __init__(self) -> None:
            super().__init__(refused={"bad"})
            self.first_out, self.release = threading.Event(), threading.Event()

        def send_message(self, QueueUrl: str, MessageBody: str, MessageGroupId: str) -> dict:
            self.first_out.set()
            assert self.release.wait(10)
            return super().send_message(QueueUrl, MessageBody, MessageGroupId)

    sqs = Held()
    queue = SqsWorkQueue(sqs, "url", "realtime")
    raised: dict[str, Exception | None] = {}

    def send(body: str) -> None:
        try:
            queue.send(body, "acme")
            raised[body] = None
        except ClientError as exc:
            raised[body] = exc

    # WHEN two more are sent while it is out, one of which SQS refuses
    while_one_is_out(
        queue._sending,
        lambda: send("alone"),
        [lambda: send("good"), lambda: send("bad")],
        sqs.first_out,
        sqs.release,
    )
    # THEN the first went alone, the two in one batch, and only the refused one's
    # sender raised
    assert [name for name, _ in sqs.calls] == ["SendMessage", "SendMessageBatch"]
    assert raised["alone"] is None and raised["good"] is None
    assert isinstance(raised["bad"], ClientError)
