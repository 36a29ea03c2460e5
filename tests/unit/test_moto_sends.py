"""The emulator's direct SendMessage and SendMessageBatch queue and answer what moto
does: one script of each, plain and not, each sent to moto's WSGI application for
one queue and to it wrapped by ``moto_reads.wrap`` for a twin queue; every answer,
and every message each queued, compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_sends
from tests.unit.test_moto_reads import REGION, answered_directly, twins

HOST = "127.0.0.1:5000"


def sqs(client: Client, target: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = client.post(
        "/",
        data=json.dumps(body).encode(),
        headers={
            "X-Amz-Target": f"AmazonSQS.{target}",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential=local/20261125/{REGION}/sqs/aws4_request, "
                "SignedHeaders=host;x-amz-date;x-amz-target, Signature=0"
            ),
            "Host": HOST,
        },
    )
    text = response.get_data()
    return response.status_code, json.loads(text) if text else None


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, dict[str, list[str]], dict[str, str]]]:
    """moto's application and the wrapped one, each with its twin queues (standard and
    FIFO); a log of the sends the wrapped one queued itself, by call; each queue's
    URL."""
    with (
        answered_directly(moto_sends, "send_message") as sent,
        answered_directly(moto_sends, "send_message_batch") as batches,
    ):
        queued = {"SendMessage": sent, "SendMessageBatch": batches}
        moto, fast = twins()
        urls = {}
        for name in ("by-moto", "by-fast", "by-moto.fifo", "by-fast.fifo"):
            attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
            status, answer = sqs(moto, "CreateQueue", {"QueueName": name, "Attributes": attributes})
            assert status == 200, answer
            urls[name] = answer["QueueUrl"]
        yield moto, fast, queued, urls


SCRIPT: list[tuple[str, dict[str, Any], bool]] = [
    # (what, the request without its queue, queued directly)
    ("a plain send", {"MessageBody": '{"request_id": "r1"}'}, True),
    ("with the tenant's group", {"MessageBody": "b2", "MessageGroupId": "acme"}, True),
    ("with no delay", {"MessageBody": "b3", "DelaySeconds": 0}, True),
    ("a delay out of range", {"MessageBody": "b4", "DelaySeconds": 901}, False),
    # moto takes these two (SQS would not); the direct send answers as moto does
    ("an empty body", {"MessageBody": ""}, True),
    ("a character SQS does not take", {"MessageBody": "bad \u0001 body"}, True),
    (
        "message attributes",
        {
            "MessageBody": "b5",
            "MessageAttributes": {"a": {"DataType": "String", "StringValue": "x"}},
        },
        False,
    ),
    ("to a FIFO queue", {"MessageBody": "b6", "MessageGroupId": "g", ".fifo": True}, False),
    ("to a queue that does not exist", {"MessageBody": "b7", "missing": True}, False),
]


def _request(request: dict[str, Any], urls: dict[str, str], side: str) -> dict[str, Any]:
    body = {k: v for k, v in request.items() if k not in (".fifo", "missing")}
    if request.get("missing"):
        url = urls[f"by-{side}"].rsplit("/", 1)[0] + "/no-such-queue"
    else:
        url = urls[f"by-{side}" + (".fifo" if request.get(".fifo") else "")]
    return {"QueueUrl": url, **body}


def _drained(client: Client, url: str) -> list[dict[str, Any]]:
    status, answer = sqs(
        client,
        "ReceiveMessage",
        {"QueueUrl": url, "MaxNumberOfMessages": 10, "MessageSystemAttributeNames": ["All"]},
    )
    assert status == 200, answer
    messages = (answer or {}).get("Messages", [])
    for m in messages:
        sqs(client, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": m["ReceiptHandle"]})
    return [
        {
            "Body": m["Body"],
            "MD5OfBody": m["MD5OfBody"],
            "MessageGroupId": m.get("Attributes", {}).get("MessageGroupId"),
        }
        for m in messages
    ]


def entries(*bodies: str, **more: Any) -> list[dict[str, Any]]:
    return [{"Id": str(i), "MessageBody": b, "MessageGroupId": "acme", **more} for i, b in
            enumerate(bodies)]  # fmt: skip


BATCHES: list[tuple[str, dict[str, Any], bool]] = [
    # (what, the request without its queue, queued directly)
    ("a batch of the router's sends", {"Entries": entries('{"r": 1}', '{"r": 2}', "x")}, True),
    ("one entry", {"Entries": entries("only")}, True),
    ("tenants' groups", {"Entries": [*entries("a"), {"Id": "9", "MessageBody": "b",
                                                        "MessageGroupId": "globex"}]}, True),
    ("no group, a delay", {"Entries": [{"Id": "a", "MessageBody": "c", "DelaySeconds": 0}]},
     True),
    # moto's backend fails the entry itself; the direct answer says so as moto does
    ("a delay out of range", {"Entries": entries("d", DelaySeconds=901)}, True),
    ("ids not distinct", {"Entries": [*entries("e"), *entries("f")]}, False),
    ("eleven entries", {"Entries": entries(*"abcdefghijk")}, False),
    ("no entries", {"Entries": []}, False),
    ("an id SQS refuses", {"Entries": [{"Id": "a b", "MessageBody": "g"}]}, False),
    ("bodies over moto's bound together", {"Entries": entries("x" * 600_000, "y" * 600_000)},
     False),
    ("message attributes", {"Entries": [{**entries("h")[0], "MessageAttributes": {
        "a": {"DataType": "String", "StringValue": "x"}}}]}, False),
    ("to a FIFO queue", {"Entries": entries("i"), ".fifo": True}, False),
    ("to a queue that does not exist", {"Entries": entries("j"), "missing": True}, False),
]  # fmt: skip


def _without_ids(answer: Any) -> Any:
    """An answer without its new messages' ids (a send's, or each of a batch's)."""
    if isinstance(answer, dict):
        answer.pop("MessageId", None)
        for entry in answer.get("Successful", []):
            entry.pop("MessageId")
    return answer


CALLS = [("SendMessage", *s) for s in SCRIPT] + [("SendMessageBatch", *s) for s in BATCHES]


@pytest.mark.parametrize(
    ("call", "what", "request_", "direct"), CALLS, ids=[f"{c[0]}: {c[1]}" for c in CALLS]
)
def test_a_send_answers_and_queues_what_moto_does(clients, call, what, request_, direct):
    moto, fast, queued, urls = clients
    before = len(queued[call])
    by_moto = sqs(moto, call, _request(request_, urls, "moto"))
    by_fast = sqs(fast, call, _request(request_, urls, "fast"))
    # THEN the answers are the same but for the new messages' ids, and each queue
    # holds the same messages after
    assert ("MessageId" in (by_fast[1] or {})) == ("MessageId" in (by_moto[1] or {})), what
    by_fast, by_moto = (
        (by_fast[0], _without_ids(by_fast[1])),
        (by_moto[0], _without_ids(by_moto[1])),
    )
    assert json.loads(json.dumps(by_fast).replace("by-fast", "by-moto")) == list(by_moto), what
    if not request_.get("missing"):
        suffix = ".fifo" if request_.get(".fifo") else ""
        assert _drained(moto, urls["by-fast" + suffix]) == _drained(
            moto, urls["by-moto" + suffix]
        ), what
    # AND the plain ones were queued directly, the rest left to moto
    assert (len(queued[call]) > before) is direct, what
