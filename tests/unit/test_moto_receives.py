"""The emulator's direct ReceiveMessage, DeleteMessageBatch and
ChangeMessageVisibilityBatch answer what moto does: one script of calls, plain and
not, run against a queue through moto's WSGI application and against its twin
through ``moto_reads.wrap``; every answer compared (message ids, receipt handles and
timestamps, which differ by nature, by the order they appear in), and the queues'
counts after each step."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_receives, moto_sqs
from tests.unit.test_moto_reads import answered_directly, twins
from tests.unit.test_moto_sends import sqs

COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
Step = Callable[[str, list[Any]], tuple[str, dict[str, Any]]]


@pytest.fixture(params=["moto as it is", "with the emulator's SQS fix"])
def clients(request) -> Iterator[tuple[Client, Client, list[list[str]], dict[str, str]]]:
    """moto's application and the wrapped one, a queue for each (filled alike), a
    log of the calls of each kind the wrapped one answered itself, and each queue's
    URL; moto's SQS as it is, or as the emulator runs it (``moto_sqs``)."""
    if request.param != "moto as it is":
        moto_sqs.apply()
        request.addfinalizer(moto_sqs.undo)
    with (
        answered_directly(moto_receives, "receive_message") as received,
        answered_directly(moto_receives, "delete_message_batch") as deleted,
        answered_directly(moto_receives, "change_message_visibility_batch") as changed,
    ):
        # The wrapper dispatches to the module's functions as they are when it wraps.
        moto, fast = twins()
        urls = {}
        for side in ("moto", "fast"):
            name = f"receives-by-{side}"
            status, answer = sqs(moto, "CreateQueue", {"QueueName": name})
            assert status == 200, answer
            urls[side] = answer["QueueUrl"]
            for i in range(14):
                group = {"MessageGroupId": f"tenant-{i % 3}"} if i % 4 else {}
                sent = {"QueueUrl": urls[side], "MessageBody": f"m{i}", **group}
                assert sqs(moto, "SendMessage", sent)[0] == 200
        yield moto, fast, [received, deleted, changed], urls


def _handles(answers: list[Any], step: int) -> list[str]:
    """The receipt handles of the messages an earlier step received."""
    return [m["ReceiptHandle"] for m in (answers[step] or {}).get("Messages", [])]


def _receive(**fields: Any) -> Step:
    return lambda url, _: ("ReceiveMessage", {"QueueUrl": url, **fields})


def _batch(target: str, step: int, extra: dict[str, Any], first: int = 0, n: int = 10) -> Step:
    def make(url: str, answers: list[Any]) -> tuple[str, dict[str, Any]]:
        handles = _handles(answers, step)[first : first + n]
        entries = [{"Id": f"e{i}", "ReceiptHandle": h, **extra} for i, h in enumerate(handles)]
        return target, {"QueueUrl": url, "Entries": entries}

    return make


def _with(step: Step, change: Callable[[dict[str, Any]], None]) -> Step:
    def make(url: str, answers: list[Any]) -> tuple[str, dict[str, Any]]:
        target, body = step(url, answers)
        change(body)
        return target, body

    return make


SYSTEM = ["ApproximateReceiveCount", "MessageGroupId"]
DELETE, VISIBILITY = "DeleteMessageBatch", "ChangeMessageVisibilityBatch"
SCRIPT: list[tuple[str, Step, bool]] = [
    # (what, the call as one side makes it from its earlier answers, answered directly)
    (
        "the worker's receive",
        _receive(
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            VisibilityTimeout=30,
            MessageSystemAttributeNames=SYSTEM,
        ),
        True,
    ),
    (
        "every attribute, the old name",
        _receive(MaxNumberOfMessages=2, AttributeNames=["All"]),
        True,
    ),
    ("one message, the queue's settings", _receive(), True),
    ("a visibility of 0", _receive(VisibilityTimeout=0, MessageSystemAttributeNames=SYSTEM), True),
    ("received again", _receive(MessageSystemAttributeNames=["All"]), True),
    ("more than 10", _receive(MaxNumberOfMessages=11), False),
    ("a wait over 20 s", _receive(WaitTimeSeconds=21), False),
    ("message attributes asked", _receive(MessageAttributeNames=["All"]), False),
    ("a count that is not a number", _receive(MaxNumberOfMessages="3"), False),
    ("a visibility past 12 hours", _receive(VisibilityTimeout=43201), False),
    ("attribute names not a list", _receive(AttributeNames="All"), False),
    ("the worker's delete", _batch(DELETE, 0, {}, 0, 4), True),
    (
        "deleted twice, and one never issued",
        _with(
            _batch(DELETE, 0, {}, 3, 2),
            lambda b: b["Entries"].append({"Id": "x", "ReceiptHandle": "not-a-handle"}),
        ),
        True,
    ),
    ("an empty delete", _with(_batch(DELETE, 0, {}), lambda b: b["Entries"].clear()), False),
    (
        "a handle twice",
        _with(
            _batch(DELETE, 0, {}, 5, 1),
            lambda b: b["Entries"].append({**b["Entries"][0], "Id": "y"}),
        ),
        False,
    ),
    ("the worker's visibility", _batch(VISIBILITY, 0, {"VisibilityTimeout": 60}, 5, 3), True),
    ("visible again", _batch(VISIBILITY, 0, {"VisibilityTimeout": 0}, 8, 2), True),
    (
        "a handle never issued",
        _with(
            _batch(VISIBILITY, 1, {"VisibilityTimeout": 5}),
            lambda b: b["Entries"].append(
                {"Id": "z", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 5}
            ),
        ),
        True,
    ),
    ("a visibility past 12 hours", _batch(VISIBILITY, 1, {"VisibilityTimeout": 43201}), False),
    (
        "the rest received",
        _receive(MaxNumberOfMessages=10, MessageSystemAttributeNames=SYSTEM),
        True,
    ),
    ("a delete of what is in hand", _batch(DELETE, 19, {}), True),
    ("a long poll of an emptied queue", _receive(WaitTimeSeconds=1, MaxNumberOfMessages=10), True),
    (
        "to a queue that does not exist",
        lambda url, _: ("ReceiveMessage", {"QueueUrl": url.rsplit("/", 1)[0] + "/no-such-queue"}),
        False,
    ),
]


def _normal(answer: Any, seen: dict[str, str]) -> Any:
    """``answer`` with each message id and receipt handle named by when it first
    appeared, timestamps as ``<time>``, and the queue's name as moto's side's."""
    if isinstance(answer, dict):
        out = {}
        for key, value in answer.items():
            if key in ("MessageId", "ReceiptHandle") and isinstance(value, str):
                value = seen.setdefault(value, f"{key}#{len(seen)}")
            elif key.endswith("Timestamp") and isinstance(value, str) and value.isdigit():
                value = "<time>"
            out[key] = _normal(value, seen)
        return out
    if isinstance(answer, list):
        return [_normal(v, seen) for v in answer]
    if isinstance(answer, str):
        return re.sub(r"receives-by-fast", "receives-by-moto", answer)
    return answer


def test_the_script_answers_and_leaves_the_queues_as_moto_does(clients):
    moto, fast, logs, urls = clients
    answers: dict[str, list[Any]] = {"moto": [], "fast": []}
    seen: dict[str, dict[str, str]] = {"moto": {}, "fast": {}}
    for what, step, plain in SCRIPT:
        before = sum(map(len, logs))
        # WHEN each side makes the step's call, from its own earlier answers
        got = {}
        for side, client in (("moto", moto), ("fast", fast)):
            target, body = step(urls[side], answers[side])
            status, answer = sqs(client, target, body)
            answers[side].append(answer)
            got[side] = (status, _normal(answer, seen[side]))
        # THEN the answers are the same, and so are the queues' counts after
        assert got["fast"] == got["moto"], what
        counts = {
            side: sqs(moto, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": COUNTS})
            for side, url in urls.items()
        }
        assert counts["fast"] == counts["moto"], what
        # AND the plain calls were answered directly, the rest by moto
        assert (sum(map(len, logs)) > before) is plain, what
