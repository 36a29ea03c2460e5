"""The local emulator's SQS under a backlog: the cost of one receive + delete as
the queue grows, with the local platform's fix (``switchyard_local.moto_sqs``) and,
beside it, moto as it is.

One client calls one call after another on loopback: fill the queue with
SendMessageBatch (500-byte bodies, a third with a MessageGroupId, as the router
sends), then time pairs of ReceiveMessage(10) + DeleteMessageBatch(10) and one
GetQueueAttributes, at each size. The emulator's memory (RSS) is read before and
after. Unpatched moto is measured at the smallest size only: a pair there already
takes about a second. Before the backlog, each emulator passes a few thousand
messages through a near-empty queue, to show the memory it keeps for messages that
have come and gone (moto as it is keeps every one).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import median
from harness.local_platform import use_local_credentials

BODY = "x" * 500
COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _client(url: str) -> Any:
    import boto3

    return boto3.session.Session().client("sqs", region_name="us-east-1", endpoint_url=url)


def _send_ten(sqs: Any, queue: str, first: int) -> None:
    sqs.send_message_batch(
        QueueUrl=queue,
        Entries=[
            {"Id": str(i), "MessageBody": BODY}
            | ({"MessageGroupId": "tenant-a"} if (first + i) % 3 == 0 else {})
            for i in range(10)
        ],
    )


def _receive_delete(sqs: Any, queue: str) -> int:
    got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    if got:
        sqs.delete_message_batch(
            QueueUrl=queue,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
    return len(got)


def measure(url: str, pid: int, sizes: tuple[int, ...], pairs: int) -> list[dict[str, Any]]:
    """At each size (the queue filled up to it), the cost of receive + delete pairs."""
    sqs = _client(url)
    queue = sqs.create_queue(QueueName=f"backlog-{time.time_ns()}")["QueueUrl"]
    queued, rows = 0, []
    for size in sizes:
        rss_before = rss_mib(pid)
        began = time.perf_counter()
        sent = 0
        while queued < size:
            _send_ten(sqs, queue, queued)
            queued += 10
            sent += 10
        fill_s = time.perf_counter() - began
        costs = []
        for _ in range(pairs):
            began = time.perf_counter()
            queued -= _receive_delete(sqs, queue)
            costs.append(time.perf_counter() - began)
        began = time.perf_counter()
        attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=COUNTS)["Attributes"]
        attributes_ms = (time.perf_counter() - began) * 1000
        rows.append(
            {
                "queued": size,
                "receive_delete_ms_p50": round(1000 * median(costs), 1),
                "receive_delete_ms_max": round(1000 * max(costs), 1),
                "pairs": pairs,
                "get_queue_attributes_ms": round(attributes_ms, 1),
                "visible_reported": int(attrs[COUNTS[0]]),
                "send_msgs_per_s": round(sent / fill_s, 0) if sent and fill_s else None,
                "rss_mib_before": rss_before,
                "rss_mib_after": rss_mib(pid),
            }
        )
    return rows


def churn(url: str, pid: int, messages: int) -> dict[str, Any]:
    """The memory the emulator keeps for messages that have come and gone: batches of
    ten sent, received and deleted through a queue that stays near empty."""
    sqs = _client(url)
    queue = sqs.create_queue(QueueName=f"churn-{time.time_ns()}")["QueueUrl"]

    def through(n: int) -> None:
        for first in range(0, n, 10):
            _send_ten(sqs, queue, first)
            _receive_delete(sqs, queue)

    through(1_000)  # warm-up: the first requests grow caches the rest reuse
    before = rss_mib(pid)
    through(messages)
    after = rss_mib(pid)
    kept = None if before is None or after is None else round((after - before) * 1024 / messages, 2)
    return {
        "messages": messages,
        "rss_mib_before": before,
        "rss_mib_after": after,
        "kib_kept_per_message": kept,
    }


@contextmanager
def _emulator(fixed: bool, log_path: Path) -> Iterator[tuple[str, int]]:
    """(url, pid) of a fresh emulator: the local platform's, or moto's own server."""
    from switchyard_local.emulator import free_port, start_emulator, wait_http
    from switchyard_local.lifetime import terminate_with_parent

    if fixed:
        running = start_emulator(log_path)
        try:
            yield running.url, running.pid
        finally:
            running.stop()
        return
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with open(log_path, "wb") as log:
        plain = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=terminate_with_parent
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(f"{url}/moto-api/", 30, "moto")
            yield url, plain.pid
        finally:
            plain.terminate()
            plain.wait(10)


def run(quick: bool) -> dict[str, Any]:
    use_local_credentials()
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    processed = 3_000 if quick else 10_000
    with tempfile.TemporaryDirectory(
        prefix="switchyard-bench-sqs-", ignore_cleanup_errors=True
    ) as folder:
        logs = Path(folder)
        # Each measurement on a fresh process, so one does not weigh on the next.
        with _emulator(True, logs / "fixed.log") as (url, pid):
            patched = measure(url, pid, sizes, 10 if quick else 30)
        with _emulator(False, logs / "plain.log") as (url, pid):
            unpatched = measure(url, pid, (1_000,), 3 if quick else 5)
        kept = {}
        for label, fixed in (("patched", True), ("unpatched", False)):
            with _emulator(fixed, logs / f"churn-{label}.log") as (url, pid):
                kept[label] = churn(url, pid, processed)
    first = patched[0]["receive_delete_ms_p50"]
    return {
        "patched": patched,
        "unpatched": unpatched,
        "growth_largest_vs_smallest": round(patched[-1]["receive_delete_ms_p50"] / first, 2),
        "speedup_at_1k": round(unpatched[0]["receive_delete_ms_p50"] / first, 1),
        "memory_after_processing": kept,
    }
