"""SQS's ReceiveMessage, DeleteMessageBatch and ChangeMessageVisibilityBatch in the
local emulator, answered straight from moto's queues.

A worker's every batch is a ReceiveMessage of up to 10, a DeleteMessageBatch of what
it ran, and for a long batch a ChangeMessageVisibilityBatch; an idle worker's long
polls are ReceiveMessages too. With ``moto_sqs``'s fixes the backend's work is small;
moto 5.2.5 serves each call through Flask, its URL dispatch, its request parser and
its response serializer, which walks the output shape attribute by attribute, as it
does for DynamoDB's reads (``moto_reads``): the machinery was most of the emulator's
time for these calls (``bench/emulator_calls.py``).

What the three answer, through ``moto_reads.wrap`` in the emulator's process, for a
standard queue that exists (a FIFO or missing queue is moto's):

- :func:`receive_message`: the form the platform sends (a queue URL, optionally
  ``MaxNumberOfMessages`` of 1-10, ``WaitTimeSeconds`` of 0-20, ``VisibilityTimeout``
  of 0-43200, ``MessageSystemAttributeNames`` or ``AttributeNames``), through moto's
  own backend ``receive_message`` (its long poll, visibility, redrive, and
  ``moto_sqs``'s fair order), answered with the messages as moto's handler lists
  them. Asked for no message attributes, moto answers none, whatever a message
  holds; a request with ``MessageAttributeNames`` or another field is moto's;
- :func:`delete_message_batch`: 1-10 entries of an ``Id`` and a ``ReceiptHandle``,
  ids and handles each distinct, through moto's backend ``delete_message_batch``
  (``moto_sqs``'s indexed delete), answered as moto's handler answers: the ids
  deleted and the entries refused (a handle not valid), each in ``Failed``;
- :func:`change_message_visibility_batch`: 1-10 entries of an ``Id``, a
  ``ReceiptHandle`` and a ``VisibilityTimeout`` of 0-43200, ids and handles each
  distinct, through moto's backend ``change_message_visibility_batch``. moto raises
  (an error for the whole call) where an entry would keep its message past SQS's
  12 hours: the call is then moto's to answer from the start, which sets the
  entries before that one again, to the same timeouts.

``tests/unit/test_moto_receives.py`` sends one script of each both ways and compares
every answer and every queue's state.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard_local.moto_wire import json_request, on_standard_queue, standard_queue

RECEIVE_TARGET = "AmazonSQS.ReceiveMessage"
DELETE_TARGET = "AmazonSQS.DeleteMessageBatch"
VISIBILITY_TARGET = "AmazonSQS.ChangeMessageVisibilityBatch"
_RECEIVE_FIELDS = {
    "QueueUrl",
    "MaxNumberOfMessages",
    "WaitTimeSeconds",
    "VisibilityTimeout",
    "MessageSystemAttributeNames",
    "AttributeNames",
}
# The system attributes moto's handler answers, in its order, and how it reads each
# from a message (None: left out).
_SYSTEM_ATTRIBUTES = {
    "AWSTraceHeader": lambda m: (
        (m.system_attributes or {}).get("AWSTraceHeader", {}).get("StringValue")
    ),
    "ApproximateFirstReceiveTimestamp": lambda m: str(m.approximate_first_receive_timestamp),
    "ApproximateReceiveCount": lambda m: str(m.approximate_receive_count),
    "MessageDeduplicationId": lambda m: m.deduplication_id,
    "MessageGroupId": lambda m: m.group_id,
    "SenderId": lambda m: m.sender_id,
    "SentTimestamp": lambda m: str(m.sent_timestamp),
    "SequenceNumber": lambda m: m.sequence_number,
}
_MAX_VISIBILITY_S = 43200  # SQS's (and moto's) longest visibility timeout
_MAX_ENTRIES = 10  # SQS's limit per batch


def receive_message(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain ReceiveMessage, its messages received; or None for moto
    to answer (nothing received)."""
    request = json_request(body, _RECEIVE_FIELDS)
    if request is None:
        return None
    count = request.get("MaxNumberOfMessages", 1)
    wait = request.get("WaitTimeSeconds")
    visibility = request.get("VisibilityTimeout")
    if not _within(count, 1, 10) or not (wait is None or _within(wait, 0, 20)):
        return None
    if not (visibility is None or _within(visibility, 0, _MAX_VISIBILITY_S)):
        return None
    lists = [request.get("AttributeNames", []), request.get("MessageSystemAttributeNames", [])]
    if not all(isinstance(names, list) for names in lists):
        return None
    asked = [*lists[0], *lists[1]]
    if not all(isinstance(name, str) for name in asked):
        return None
    found = standard_queue(environ, request.get("QueueUrl"))
    if found is None:
        return None
    backend, name, queue = found
    if wait is None:
        wait = int(queue.receive_message_wait_time_seconds)
    if visibility is None:
        visibility = queue.visibility_timeout
    included = [a for a in _SYSTEM_ATTRIBUTES if "All" in asked or a in asked]
    messages = []
    for message in backend.receive_message(name, count, wait, visibility, []):
        answer: dict[str, Any] = {
            "MessageId": message.id,
            "ReceiptHandle": message.receipt_handle,
            "MD5OfBody": message.body_md5,
            "Body": message.body,
        }
        if included:
            values = ((a, _SYSTEM_ATTRIBUTES[a](message)) for a in included)
            answer["Attributes"] = {a: v for a, v in values if v is not None}
        messages.append(answer)
    return json.dumps({"Messages": messages} if messages else {}).encode()


def delete_message_batch(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain DeleteMessageBatch, its messages deleted; or None for
    moto to answer (nothing deleted)."""
    request = json_request(body, {"QueueUrl", "Entries"})
    entries = _entries(request, {"Id", "ReceiptHandle"})
    if request is None or entries is None:
        return None
    found = standard_queue(environ, request.get("QueueUrl"))
    if found is None:
        return None
    backend, name, _ = found
    deleted, failed = backend.delete_message_batch(name, entries)
    return _batch_answer(deleted, failed)


def change_message_visibility_batch(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain ChangeMessageVisibilityBatch, its timeouts set; or None
    for moto to answer."""
    request = json_request(body, {"QueueUrl", "Entries"})
    entries = _entries(request, {"Id", "ReceiptHandle", "VisibilityTimeout"})
    if request is None or entries is None:
        return None
    if not all(_within(e["VisibilityTimeout"], 0, _MAX_VISIBILITY_S) for e in entries):
        return None
    # Past the 12-hour limit, moto's backend refuses the whole call: moto's error.
    done = on_standard_queue(
        environ,
        request.get("QueueUrl"),
        lambda backend, name: backend.change_message_visibility_batch(name, entries),
    )
    if done is None:
        return None
    changed, failed = done
    return _batch_answer(changed, failed)


def _batch_answer(done: list[str], failed: list[dict[str, Any]]) -> bytes:
    """A batch call's answer, as moto's handler forms it."""
    return json.dumps({"Successful": [{"Id": i} for i in done], "Failed": failed}).encode()


def _entries(request: dict[str, Any] | None, fields: set[str]) -> list[dict[str, Any]] | None:
    """A batch request's entries, if there are 1-10, each of exactly ``fields`` (the
    id and handle strings), with no id or handle twice; None otherwise."""
    entries = request.get("Entries") if request is not None else None
    if not isinstance(entries, list) or not 1 <= len(entries) <= _MAX_ENTRIES:
        return None
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != fields:
            return None
        if not isinstance(entry["Id"], str) or not isinstance(entry["ReceiptHandle"], str):
            return None
    for field in ("Id", "ReceiptHandle"):
        if len({e[field] for e in entries}) != len(entries):
            return None
    return entries


def _within(value: Any, low: int, high: int) -> bool:
    """``value`` an integer (not a boolean) from ``low`` to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
