"""Lambda's SQS event source mapping, for the local platform (moto does not run it).

As Lambda does for the splitter's batch-drop queue: long-poll the queue, invoke the
function with up to ``batch_size`` messages in the event shape Lambda sends, then
delete the messages it processed. With partial batch responses the function names
the messages it could not process (``batchItemFailures``): those stay, come back
after the queue's visibility timeout, and go to its DLQ after ``maxReceiveCount``.
A function that raises, or whose process dies, leaves the whole batch to come back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

log = Logger(service="switchyard-local-event-source")

Invoke = Callable[[dict[str, Any]], Any]


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event Lambda builds from received SQS messages."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


def processed(messages: list[dict[str, Any]], response: Any) -> list[dict[str, Any]]:
    """The messages a partial batch response says were processed."""
    failures = response.get("batchItemFailures", []) if isinstance(response, dict) else []
    failed = {f.get("itemIdentifier") for f in failures}
    return [m for m in messages if m["MessageId"] not in failed]


class SqsEventSource:
    """Polls ``queue_url`` on a thread and hands its messages to ``invoke``."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        invoke: Invoke,
        *,
        region: str,
        batch_size: int,
        wait_seconds: int = 2,
    ) -> None:
        self._sqs = sqs
        self._url = queue_url
        self._invoke = invoke
        self._region = region
        self._batch_size = batch_size
        self._wait = wait_seconds
        self._arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-source", daemon=True)
        self.invocations = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; an invocation in progress finishes first."""
        self._stopping.set()
        self._thread.join(timeout=self._wait + 60)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the emulator went away, or a bad answer
                log.exception("event source poll failed")
                self._stopping.wait(1)

    def poll_once(self) -> int:
        """One long poll and, if messages came, one invocation; returns how many of
        them were processed (and deleted)."""
        messages = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=self._batch_size,
            WaitTimeSeconds=self._wait,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return 0
        self.invocations += 1
        try:
            response = self._invoke(sqs_event(messages, self._arn, self._region))
        except Exception as exc:  # noqa: BLE001 - the whole batch comes back later
            log.warning("invocation failed; its messages will come back", extra={"error": str(exc)})
            return 0
        done = processed(messages, response)
        for start in range(0, len(done), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(done[start : start + 10])
            ]
            self._sqs.delete_message_batch(QueueUrl=self._url, Entries=entries)
        if len(done) < len(messages):
            log.warning(
                "messages failed; they will come back",
                extra={"failed": [m["MessageId"] for m in messages if m not in done]},
            )
        return len(done)
