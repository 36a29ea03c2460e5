"""SQS's SendMessage and SendMessageBatch in the local emulator, queued straight
into moto's queue.

Every request the router admits is one SendMessage; a burst of 1,000 one-sentence
async requests is 1,000 of them. moto 5.2.5 serves each through Flask, its URL
dispatch, its request parser and its response serializer around a send that is an
append to the queue's list; as with DynamoDB's GetItem and PutItem (``moto_reads``,
``moto_puts``), the machinery is most of the emulator's time.

What :func:`send_message` answers, through ``moto_reads.wrap`` in the emulator's
process: a SendMessage of the form the platform sends (a queue URL, a body,
optionally a ``MessageGroupId`` and ``DelaySeconds``) to a standard queue that
exists. It runs moto's own backend ``send_message`` (its checks of the body and the
delay, and ``moto_sqs``'s queue), and answers the message's id and body digest, as
moto does. Anything else goes to moto's application unchanged: message attributes,
a deduplication id, a FIFO or missing queue, and any send moto's checks refuse (a
body too long, a delay out of range), which queued nothing, so moto answers it with
its own error. What moto takes and SQS would not (an empty body, a control
character), the direct send takes as well.
A router process that sends several messages at once sends them in one
SendMessageBatch (``switchyard.queues.SqsWorkQueue``). :func:`send_message_batch`
answers one of the same form (a queue URL and entries of an id, a body, optionally
a group and a delay) to a standard queue that exists, through moto's own backend
``send_message_batch`` (its checks of the ids, the sizes and each message before
any is queued), and answers as moto does: each message's id and digest, and the
entries moto's backend failed. Anything else goes to moto's application, as for
a SendMessage.
``tests/unit/test_moto_sends.py`` sends one script of each both ways and compares
every answer and every message queued.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard_local.moto_wire import json_request, on_standard_queue

TARGET = "AmazonSQS.SendMessage"
BATCH_TARGET = "AmazonSQS.SendMessageBatch"
_FIELDS = {"QueueUrl", "MessageBody", "MessageGroupId", "DelaySeconds"}
_ENTRY_FIELDS = {"Id", "MessageBody", "MessageGroupId", "DelaySeconds"}


def send_message(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain SendMessage, queued; or None for moto to answer (nothing
    queued)."""
    request = json_request(body, _FIELDS)
    if request is None:
        return None
    url = request.get("QueueUrl")
    if not isinstance(url, str) or not _plain_send(request):
        return None
    text, group, delay = (
        request["MessageBody"],
        request.get("MessageGroupId"),
        request.get("DelaySeconds"),
    )
    message = on_standard_queue(
        environ,
        url,
        lambda backend, name: backend.send_message(name, text, delay_seconds=delay, group_id=group),
    )
    if message is None:
        return None
    return json.dumps({"MD5OfMessageBody": message.body_md5, "MessageId": message.id}).encode()


def send_message_batch(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain SendMessageBatch, queued; or None for moto to answer
    (nothing queued)."""
    request = json_request(body, {"QueueUrl", "Entries"})
    if request is None:
        return None
    url, entries = request.get("QueueUrl"), request.get("Entries")
    if not isinstance(url, str) or not isinstance(entries, list) or not entries:
        return None
    batch: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not set(entry) <= _ENTRY_FIELDS:
            return None
        if not isinstance(entry.get("Id"), str) or not _plain_send(entry):
            return None
        # As moto's handler hands them to its backend.
        batch[str(i)] = {
            **entry,
            "MessageAttributes": {},
            "DelaySeconds": entry.get("DelaySeconds"),
        }
    sent = on_standard_queue(
        environ, url, lambda backend, name: backend.send_message_batch(name, batch)
    )
    if sent is None:
        return None
    messages, failed = sent
    successful = [
        {"Id": m.user_id, "MessageId": m.id, "MD5OfMessageBody": m.body_md5} for m in messages
    ]
    return json.dumps({"Successful": successful, "Failed": failed}).encode()


def _plain_send(fields: dict[str, Any]) -> bool:
    """A SendMessage's fields, or a SendMessageBatch entry's, of the plain form: a
    body, optionally a group and a whole number of seconds' delay."""
    group, delay = fields.get("MessageGroupId"), fields.get("DelaySeconds")
    return (
        isinstance(fields.get("MessageBody"), str)
        and (group is None or isinstance(group, str))
        and (delay is None or (isinstance(delay, int) and not isinstance(delay, bool)))
    )
