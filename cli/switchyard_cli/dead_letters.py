"""A model's dead-letter queues: what sits in them, and moving it back to work.

SQS moves a message to its queue's DLQ on the receive after ``maxReceiveCount``;
by then the worker has written the request's final error (``retries_exhausted``).
Both operations speak SQS's own API through the same boto3 client on the emulator
and in AWS, and find each DLQ the way SQS does: from the work queue's redrive
policy.

Reading a queue is receiving from it, so a listing holds what it has read out of
sight while it pages (otherwise SQS hands the same messages out again) and makes
all of it visible again before it returns. A redrive reopens a request's result
before it sends the message back: a worker deletes unrun any message whose request
has already ended, so the other order could lose the work. It sends before it
deletes, so a failure in between leaves a copy in the DLQ, never none.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from switchyard.fields import field_path
from switchyard.queues import SQS_BATCH_LIMIT, Received, SqsWorkQueue
from switchyard.results import ResultStore
from switchyard.schemas import ErrorInfo, Lane, QueueMessage, ResultRecord

# How long a listing keeps what it has read out of sight while it pages on; it
# makes it all visible again when it is done.
LIST_HOLD_SECONDS = 30
PURGED_RECORD_TTL_S = 86_400  # a purged request with no record gets one for a day
# A redrive deletes what it has moved; it holds only messages that came back to
# the DLQ during the same redrive (failed again), and lets them go at the end.
REDRIVE_HOLD_SECONDS = 300
# Long polling asks every SQS server, so an empty answer means an empty queue.
POLL_SECONDS = 1


class DeadLetterError(RuntimeError):
    """A DLQ cannot be reached or acted on as asked."""


@dataclass(frozen=True)
class DeadLetter:
    """One message in a DLQ, decoded as far as it goes."""

    received: Received
    message: QueueMessage | None
    # What the body says where it is not a valid ``QueueMessage``.
    raw: dict[str, Any]
    problem: str | None  # why the body is not a valid QueueMessage

    @property
    def lane(self) -> Lane:
        return self.received.lane

    @property
    def request_id(self) -> str | None:
        return self.message.request_id if self.message else _text(self.raw.get("request_id"))

    @property
    def tenant(self) -> str | None:
        if self.message:
            return self.message.tenant
        return _text(self.raw.get("tenant")) or self.received.group

    @property
    def version(self) -> str | None:
        return self.message.version if self.message else _text(self.raw.get("version"))

    @property
    def receives(self) -> int:
        """Receives before this read: the work queue's attempts (SQS keeps the count
        when it moves a message), plus one for each earlier read of the DLQ."""
        return max(0, self.received.receive_count - 1)


@dataclass(frozen=True)
class Listed:
    """A dead letter and its request's result record, as an operator reads them."""

    letter: DeadLetter
    enqueued_at: float | None
    status: str | None
    last_error: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "lane": self.letter.lane,
            "message_id": self.letter.received.message_id,
            "request_id": self.letter.request_id,
            "tenant": self.letter.tenant,
            "version": self.letter.version,
            "receives": self.letter.receives,
            "enqueued_at": self.enqueued_at,
            "status": self.status,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class Redriven:
    """What a redrive of one lane did."""

    lane: Lane
    moved: int
    reopened: int
    # Moved by this redrive, failed again and back in the DLQ before it ended:
    # left there, so that one redrive never loops.
    came_back: int


def dlq_url(sqs: Any, queue_url: str) -> str:
    """The DLQ of a work queue, from the queue's redrive policy."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    policy = attributes.get("Attributes", {}).get("RedrivePolicy")
    if not policy:
        raise DeadLetterError(f"{queue_url} has no redrive policy, so no DLQ")
    # arn:aws:sqs:<region>:<account>:<name>
    arn = json.loads(policy)["deadLetterTargetArn"]
    account, name = arn.split(":")[4:6]
    return str(sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"])


def list_dead_letters(sqs: Any, results: ResultStore, queue_url: str, lane: Lane) -> list[Listed]:
    """Every message in the DLQ of ``queue_url``, with its request's last error;
    the messages stay where they are, visible."""
    url = dlq_url(sqs, queue_url)
    seen: dict[str, DeadLetter] = {}
    with _held(sqs, url, lane) as hold:
        while True:
            page = _receive(sqs, url, lane, LIST_HOLD_SECONDS)
            hold(page)
            fresh = [m for m in page if m.received.message_id not in seen]
            if not fresh:
                break
            seen.update((m.received.message_id, m) for m in fresh)
    return [_listed(letter, results) for letter in seen.values()]


def redrive(sqs: Any, results: ResultStore, queue_url: str, lane: Lane) -> Redriven:
    """Move every message in the DLQ of ``queue_url`` back to the queue (the same
    body, ``MessageGroupId`` = tenant), reopening each ``retries_exhausted`` result
    first so that a worker answers the request again."""
    url = dlq_url(sqs, queue_url)
    dlq = SqsWorkQueue(sqs, url, lane)
    sent: set[bytes] = set()  # the bodies moved, to know one that comes back
    came_back: set[str] = set()
    moved = reopened = 0
    with _held(sqs, url, lane) as hold:
        while page := _receive(sqs, url, lane, REDRIVE_HOLD_SECONDS):
            back = [m for m in page if _digest(m) in sent]
            hold(back)
            came_back.update(m.received.message_id for m in back)
            fresh = [m for m in page if _digest(m) not in sent]
            for letter in fresh:
                if letter.message and results.reopen(
                    letter.message.tenant, letter.message.request_id
                ):
                    reopened += 1
                group = letter.tenant
                sqs.send_message(
                    QueueUrl=queue_url,
                    MessageBody=letter.received.body,
                    **({"MessageGroupId": group} if group else {}),
                )
            dlq.delete([m.received for m in fresh])
            moved += len(fresh)
            sent.update(_digest(m) for m in fresh)
    return Redriven(lane=lane, moved=moved, reopened=reopened, came_back=len(came_back))


def purge(sqs: Any, results: ResultStore, queue_url: str, lane: Lane) -> int:
    """Delete every message in the DLQ of ``queue_url``: for messages that will never
    succeed (undecodable, or of a version that cannot run). A request keeps the
    final error its worker wrote; one still recorded as queued (its worker died
    before writing it) is answered ``error`` now, so that every request ends. How
    many messages were deleted."""
    url = dlq_url(sqs, queue_url)
    dlq = SqsWorkQueue(sqs, url, lane)
    deleted = 0
    while page := _receive(sqs, url, lane, REDRIVE_HOLD_SECONDS):
        for letter in page:
            if letter.message is not None:
                _end(results, letter.message)
        dlq.delete([m.received for m in page])
        deleted += len(page)
    return deleted


def _end(results: ResultStore, message: QueueMessage) -> None:
    """A purged message's request ended ``error``, unless it had ended already."""
    record = results.get(message.tenant, message.request_id)
    if record is not None and record.status != "queued":
        return
    now = time.time()
    base = record or ResultRecord.queued_for(message, int(now) + PURGED_RECORD_TTL_S)
    error = ErrorInfo(code="purged", message="its message was purged from the DLQ unanswered")
    ended = {"status": "error", "error": error, "completed_at": now}
    results.complete(base.model_copy(update=ended))


@contextmanager
def _held(sqs: Any, url: str, lane: Lane) -> Iterator[Callable[[list[DeadLetter]], None]]:
    """Collects messages held out of sight, and makes them visible again at the end
    (a message read twice is released by its newest receipt handle)."""
    held: dict[str, Received] = {}

    def hold(letters: list[DeadLetter]) -> None:
        held.update((m.received.message_id, m.received) for m in letters)

    try:
        yield hold
    finally:
        if held:
            SqsWorkQueue(sqs, url, lane).set_visibility(list(held.values()), 0)


def _receive(sqs: Any, url: str, lane: Lane, hold_seconds: int) -> list[DeadLetter]:
    response = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=SQS_BATCH_LIMIT,
        VisibilityTimeout=hold_seconds,
        WaitTimeSeconds=POLL_SECONDS,
        MessageSystemAttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
    )
    return [_decode(m, lane) for m in response.get("Messages", [])]


def _decode(m: dict[str, Any], lane: Lane) -> DeadLetter:
    attributes = m.get("Attributes", {})
    received = Received(
        body=m["Body"],
        receipt_handle=m["ReceiptHandle"],
        message_id=m["MessageId"],
        receive_count=int(attributes.get("ApproximateReceiveCount", "1")),
        group=attributes.get("MessageGroupId"),
        lane=lane,
    )
    try:
        raw = json.loads(received.body)
    except ValueError as exc:
        return DeadLetter(received, None, {}, f"undecodable: not JSON ({exc})")
    if not isinstance(raw, dict):
        return DeadLetter(received, None, {}, "undecodable: not a JSON object")
    try:
        return DeadLetter(received, QueueMessage.model_validate(raw), raw, None)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = field_path(first["loc"]) or "message"
        return DeadLetter(received, None, raw, f"undecodable: {where}: {first['msg']}")


def _listed(letter: DeadLetter, results: ResultStore) -> Listed:
    if letter.message is None:
        enqueued = letter.raw.get("enqueued_at")
        return Listed(
            letter,
            float(enqueued) if isinstance(enqueued, int | float) else None,
            None,
            letter.problem or "",
        )
    record = results.get(letter.message.tenant, letter.message.request_id)
    return Listed(
        letter,
        letter.message.enqueued_at,
        record.status if record else None,
        _last_error(record),
    )


def _last_error(record: ResultRecord | None) -> str:
    if record is None:
        return "no result record (expired from the results table, or never written)"
    if record.error is not None:
        return record.error.message
    if record.status == "queued":
        return record.last_failure or "no failure recorded"
    return f"none: the request ended {record.status}"


def _digest(letter: DeadLetter) -> bytes:
    return hashlib.sha256(letter.received.body.encode()).digest()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
