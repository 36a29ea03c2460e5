"""The queue protocol between router and worker.

Messages are ``QueueMessage`` JSON. Inputs larger than the claim-check threshold go
to S3 first; a tensor signature's rows travel inline as one block of numbers
(``tensor``), which a worker stacks without parsing them. ``MessageGroupId`` is the
tenant, so SQS fair queues keep one noisy tenant from filling every worker's receive.
"""

from __future__ import annotations

import base64
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

from pydantic import TypeAdapter, ValidationError, create_model

from switchyard.aws_json import all_answered, calls_at_once
from switchyard.payloads import PayloadStore
from switchyard.schemas import Lane, QueueMessage, TensorSignature
from switchyard.signatures import tensor_row
from switchyard.together import Together

log = logging.getLogger(__name__)

# SQS's own bound for one message is 256 KiB; the claim check keeps well below it.
SQS_BATCH_LIMIT = 10
# A SendMessageBatch's bodies together, at most: SQS's bound for a batch, as for
# one message.
SQS_BATCH_BYTES = 262_144


class Received(NamedTuple):
    """A message in hand: its body and what is needed to delete or release it. A
    named tuple: a receive builds one per message, in a third of a frozen
    dataclass's time."""

    body: str
    receipt_handle: str
    message_id: str
    receive_count: int
    group: str | None
    lane: Lane


class WorkQueue(Protocol):
    lane: Lane

    def send(self, body: str, group: str) -> None: ...

    def receive(
        self, max_messages: int, wait_seconds: int, visibility_seconds: int | None = None
    ) -> list[Received]:
        """Up to ``max_messages``; ``visibility_seconds`` overrides the queue's
        visibility timeout for these messages. Without a wait, more than a receive
        of SQS's takes (10) are received by calls sent together; a long poll
        (``wait_seconds`` > 0) is one call, of 10 at most."""
        ...

    def delete(self, messages: Sequence[Received]) -> None: ...

    def set_visibility(self, messages: Sequence[Received], seconds: int) -> None: ...


@dataclass(frozen=True)
class ModelLanes:
    """A model's two work queues: realtime first, batch when idle."""

    realtime: WorkQueue
    batch: WorkQueue


class SqsWorkQueue:
    def __init__(self, sqs: Any, url: str, lane: Lane) -> None:
        self._sqs = sqs
        self.url = url
        self.lane: Lane = lane
        # Messages that threads of one process send at once go in one call.
        self._sending = Together(self._send_all)

    def send(self, body: str, group: str) -> None:
        failed = self._sending((body, group))
        if failed is not None:
            raise failed

    def _send_all(self, sends: list[tuple[str, str]]) -> list[Exception | None]:
        """Each send's failure, or None: one alone as a SendMessage, several as
        SendMessageBatches of up to 10 within SQS_BATCH_BYTES. Each batch's failure,
        or an entry's, is its own senders' only, so that no message sent is taken
        for one that was not."""
        if len(sends) == 1:
            ((body, group),) = sends
            self._sqs.send_message(QueueUrl=self.url, MessageBody=body, MessageGroupId=group)
            return [None]
        failures: list[Exception | None] = []
        for batch in _send_batches(sends):
            entries = [
                {"Id": str(i), "MessageBody": body, "MessageGroupId": group}
                for i, (body, group) in enumerate(batch)
            ]
            try:
                answer = self._sqs.send_message_batch(QueueUrl=self.url, Entries=entries)
            except Exception as exc:  # noqa: BLE001 - raised to this batch's senders
                failures += [exc] * len(batch)
                continue
            failed = {entry["Id"]: entry for entry in answer.get("Failed", [])}
            failures += [_send_failed(failed.get(str(i))) for i in range(len(batch))]
        return failures

    def receive(
        self, max_messages: int, wait_seconds: int, visibility_seconds: int | None = None
    ) -> list[Received]:
        # A long poll is one call: several would each hold a connection for the wait,
        # and their answers, read in turn, would wait on the slowest.
        wanted = min(max_messages, SQS_BATCH_LIMIT) if wait_seconds > 0 else max_messages
        extra = {} if visibility_seconds is None else {"VisibilityTimeout": visibility_seconds}
        calls = [
            {
                "QueueUrl": self.url,
                "MaxNumberOfMessages": min(SQS_BATCH_LIMIT, wanted - i),
                "WaitTimeSeconds": wait_seconds,
                "MessageSystemAttributeNames": ["ApproximateReceiveCount", "MessageGroupId"],
                **extra,
            }
            for i in range(0, max(wanted, 1), SQS_BATCH_LIMIT)
        ]
        answers = calls_at_once(self._sqs, "receive_message", calls)
        failed = [a for a in answers if isinstance(a, Exception)]
        if failed and len(failed) == len(answers):
            raise failed[0]
        if failed:
            # What the others received is in hand; what a failed call may have taken
            # comes back after its visibility timeout.
            log.warning("a receive failed beside others", extra={"error": repr(failed[0])})
        return [
            Received(
                body=m["Body"],
                receipt_handle=m["ReceiptHandle"],
                message_id=m["MessageId"],
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
                group=m.get("Attributes", {}).get("MessageGroupId"),
                lane=self.lane,
            )
            for answer in answers
            if not isinstance(answer, Exception)
            for m in answer.get("Messages", [])
        ]

    # A worker's batch is deleted, or released, ten messages to a call (SQS's most),
    # the calls sent together: they wait on SQS at once, not one after another.

    def delete(self, messages: Sequence[Received]) -> None:
        calls = self._entry_calls(messages, {})
        all_answered(calls_at_once(self._sqs, "delete_message_batch", calls))

    def set_visibility(self, messages: Sequence[Received], seconds: int) -> None:
        calls = self._entry_calls(messages, {"VisibilityTimeout": seconds})
        all_answered(calls_at_once(self._sqs, "change_message_visibility_batch", calls))

    def _entry_calls(
        self, messages: Sequence[Received], each: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The calls' parameters for ``messages``, ten to a call, each entry a message's
        receipt handle with ``each``."""
        return [
            {
                "QueueUrl": self.url,
                "Entries": [
                    {"Id": str(i), "ReceiptHandle": m.receipt_handle, **each}
                    for i, m in enumerate(chunk)
                ],
            }
            for chunk in _chunks(messages)
        ]


def _send_batches(sends: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Sends in order, cut into batches SendMessageBatch takes."""
    batches: list[list[tuple[str, str]]] = []
    size = 0
    for send in sends:
        length = len(send[0].encode())
        if not batches or len(batches[-1]) >= SQS_BATCH_LIMIT or size + length > SQS_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(send)
        size += length
    return batches


def _send_failed(entry: dict[str, Any] | None) -> Exception | None:
    """A SendMessageBatch entry's failure as the error its SendMessage would raise."""
    if entry is None:
        return None
    from botocore.exceptions import ClientError

    error = {"Code": entry.get("Code", "InternalError"), "Message": entry.get("Message", "")}
    return ClientError({"Error": error}, "SendMessageBatch")


def _chunks(messages: Sequence[Received]) -> list[Sequence[Received]]:
    return [messages[i : i + SQS_BATCH_LIMIT] for i in range(0, len(messages), SQS_BATCH_LIMIT)]


def encode_message(
    message: QueueMessage, payloads: PayloadStore, claim_check_bytes: int, *, rows: bool = False
) -> str:
    """The message body, with its inputs moved to S3 if the body would be too large.
    ``rows``: its inputs are a tensor signature's rows, checked, and travel as one
    block of numbers (``QueueMessage.tensor``)."""
    if rows and message.inputs is not None:
        # The message without its inputs, and its block of numbers (base64, as
        # ``QueueMessage.tensor`` dumps it) last: a third of the time a copy of the
        # message with its block would take to dump.
        block = base64.b64encode(tensor_block(message.inputs)).decode("ascii")
        without = message.model_dump_json(exclude_none=True, exclude={"inputs"})
        body = f'{without[:-1]},"tensor":"{block}"}}'
    else:
        body = message.model_dump_json(exclude_none=True)
    if len(body.encode()) <= claim_check_bytes:
        return body
    key = f"inputs/{message.tenant}/{message.request_id}.json"
    ref = payloads.put_json(key, message.inputs)
    return message.model_copy(update={"inputs": None, "inputs_ref": ref}).model_dump_json(
        exclude_none=True
    )


def tensor_block(rows: list[list[float]]) -> bytes:
    """Rows of numbers as ``QueueMessage.tensor`` holds them: float64, little-endian,
    row after row."""
    flat = [x for row in rows for x in row]
    return struct.pack(f"<{len(flat)}d", *flat)


_MESSAGES: TypeAdapter[list[QueueMessage]] = TypeAdapter(list[QueueMessage])


def decode_messages(bodies: list[str]) -> list[QueueMessage | ValidationError]:
    """Each body's message, or why it is none: a receive's bodies parsed and validated
    in one call into pydantic-core (:func:`_decoded_together`); where that fails,
    each is decoded alone, so that one bad body costs only itself."""
    messages = _decoded_together(bodies, _MESSAGES)
    return messages if messages is not None else [_decode_one(b) for b in bodies]


def decode_checked(bodies: list[str], signature: TensorSignature) -> list[QueueMessage] | None:
    """Each body's message, its inline inputs checked against ``signature`` as they
    are parsed (each a :func:`~switchyard.signatures.tensor_row`), in one call: the
    inputs need no second pass. None unless every body is such a message: those
    are then decoded by :func:`decode_messages` and checked apart, which names what
    fails."""
    return _decoded_together(bodies, _checked_messages(signature))


def joined_bodies(bodies: list[str]) -> str | None:
    """A receive's bodies as one JSON array, to be parsed in one call, if each is one
    JSON object by its brackets (as ``encode_message`` writes them); None if not, or
    if there are none. What it parses to holds one message per body only if it holds
    as many as there are bodies: a body of two objects joined by a comma reads as two."""
    if not bodies or not all(b[:1] == "{" and b[-1:] == "}" for b in bodies):
        return None
    return f"[{','.join(bodies)}]"


def _decoded_together(
    bodies: list[str], adapter: TypeAdapter[list[Any]]
) -> list[QueueMessage] | None:
    """The bodies' messages parsed as one JSON array (:func:`joined_bodies`), if it
    holds one message per body; None if not, or if any body fails."""
    joined = joined_bodies(bodies)
    if joined is None:
        return None
    try:
        messages = adapter.validate_json(joined)
    except ValidationError:
        return None
    return list(messages) if len(messages) == len(bodies) else None


@lru_cache(maxsize=16)
def _checked_messages(signature: TensorSignature) -> TypeAdapter[list[Any]]:
    """Messages whose inline inputs are ``signature``'s rows: a ``QueueMessage``
    whose ``inputs`` field says so, read from the same bodies."""
    checked = create_model(
        "QueueMessage",
        __base__=QueueMessage,
        inputs=(list[tensor_row(signature)] | None, None),  # type: ignore[misc]
    )
    return TypeAdapter(list[checked])  # type: ignore[valid-type]


def _decode_one(body: str) -> QueueMessage | ValidationError:
    try:
        return QueueMessage.model_validate_json(body)
    except ValidationError as exc:
        return exc


def load_inputs(message: QueueMessage, payloads: PayloadStore) -> list[Any]:
    """The message's inputs, following its claim check if it has one."""
    if message.inputs is not None:
        return message.inputs
    assert message.inputs_ref is not None
    inputs = payloads.get_json(message.inputs_ref)
    if not isinstance(inputs, list) or len(inputs) != message.n_inputs:
        raise ValueError(f"{message.inputs_ref} does not hold {message.n_inputs} inputs")
    return inputs
