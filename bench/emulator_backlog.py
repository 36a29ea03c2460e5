"""The local emulator's SQS under a backlog: the cost of one receive + delete as
the queue grows, with the local platform's fix (``switchyard_local.moto_sqs``) and,
beside it, moto as it is.

One client calls one call after another on loopback: fill the queue with
SendMessageBatch (500-byte bodies, a third with a MessageGroupId, as the router
sends), then time pairs of ReceiveMessage(10) + DeleteMessageBatch(10) and one
GetQueueAttributes, at each size. The emulator's memory (RSS) is read before and
after. Unpatched moto is measured at the smallest size only: a pair there already
takes about a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median
from bench.platform_proc import free_port

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


def measure(url: str, pid: int, sizes: tuple[int, ...], pairs: int) -> list[dict[str, Any]]:
    import boto3

    sqs = boto3.session.Session().client("sqs", region_name="us-east-1", endpoint_url=url)
    queue = sqs.create_queue(QueueName=f"backlog-{time.time_ns()}")["QueueUrl"]
    queued, rows = 0, []
    for size in sizes:
        rss_before = rss_mib(pid)
        began = time.perf_counter()
        sent = 0
        while queued < size:
            entries = [
                {"Id": str(i), "MessageBody": BODY}
                | ({"MessageGroupId": "tenant-a"} if (queued + i) % 3 == 0 else {})
                for i in range(10)
            ]
            sqs.send_message_batch(QueueUrl=queue, Entries=entries)
            queued += 10
            sent += 10
        fill_s = time.perf_counter() - began
        costs = []
        for _ in range(pairs):
            began = time.perf_counter()
            got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
            sqs.delete_message_batch(
                QueueUrl=queue,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
                ],
            )
            costs.append(time.perf_counter() - began)
            queued -= len(got)
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


def run(quick: bool) -> dict[str, Any]:
    from switchyard_local.emulator import start_emulator, wait_http

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-sqs-"))
    fixed = start_emulator(workdir / "fixed.log", free_port())
    try:
        patched = measure(fixed.url, fixed.pid, sizes, 10 if quick else 30)
    finally:
        fixed.stop()
    port = free_port()
    with open(workdir / "plain.log", "wb") as log:
        plain = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(f"{url}/moto-api/", 30, "moto")
            unpatched = measure(url, plain.pid, (1_000,), 3 if quick else 5)
        finally:
            plain.terminate()
            plain.wait(10)
    first = patched[0]["receive_delete_ms_p50"]
    return {
        "patched": patched,
        "unpatched": unpatched,
        "growth_largest_vs_smallest": round(patched[-1]["receive_delete_ms_p50"] / first, 2),
        "speedup_at_1k": round(unpatched[0]["receive_delete_ms_p50"] / first, 1),
    }
