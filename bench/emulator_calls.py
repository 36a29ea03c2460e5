"""The local emulator's CPU per call, by operation: what each AWS call the platform
makes most costs the emulator's process, and whether the emulator answered it
directly (``switchyard_local.moto_reads`` and the paths it dispatches to) or
through moto's request machinery.

One client on loopback calls each operation ``n`` times, through the platform's
own stores (``SqsWorkQueue``, ``DynamoDBResultStore``, ``DynamoDBTokenStream``,
``DynamoDBQueuedCounts``, ``DynamoDBResultCache``), so the requests and items are
the platform's shapes, against a private emulator provisioned from the manifest
(``bench.emulator``; IAM not enforced, where the local platform enforces it). The
emulator's CPU (user + system, from /proc) over an operation's calls, divided by
the calls made, is its cost per call; the client's wall time per call is beside
it. What a run sets up (items to read, messages to receive) is not counted. SQS
runs a worker's cycle ``n`` times over a backlog in three tenants' message groups
(receive 10, extend their visibility, delete them); a ReceiveMessage that finds
the queue empty (no wait) is counted apart. DynamoDB's operations run one after
another, so the tenant's partition holds what the ones before wrote (a Query's
cost grows with it; its note says how many items it held).

Which path answered: the emulator marks its direct answers with a header
(``moto_wire.DIRECT_HEADER``); each operation's calls are seen through botocore's
``after-call`` event, and ``direct`` says whether every one of them was marked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.emulator import REGION, Emulator, emulator
from bench.proc_cpu import cpu_seconds
from switchyard.admission import DynamoDBQueuedCounts, queued_lease
from switchyard.generation import Chunk, DynamoDBTokenStream
from switchyard.payloads import S3PayloadStore
from switchyard.queues import SqsWorkQueue
from switchyard.result_cache import CacheEntry, DynamoDBResultCache
from switchyard.results import DynamoDBResultStore
from switchyard.schemas import ResultRecord
from switchyard.tables import RESULTS
from switchyard_local.moto_wire import DIRECT_HEADER

TENANT = "acme"
MODEL = "minilm-embed"
# A queued message's body as the router sends one (its size; the emulator does not
# read it).
BODY = '{"schema_version":1,"inputs":["' + "a sentence of input text " * 12 + '"]}'
EMBEDDING = [[round(0.001 * i, 4) for i in range(384)]]


@dataclass
class Counted:
    """Calls seen on one client, and whether each was answered directly."""

    calls: int = 0
    direct: int = 0

    def after_call(self, http_response: Any, **_: Any) -> None:
        self.calls += 1
        self.direct += DIRECT_HEADER in http_response.headers


def _record(request_id: str, status: str, outputs: list[Any] | None = None) -> ResultRecord:
    now = time.time()
    return ResultRecord(
        request_id=request_id,
        tenant=TENANT,
        model=MODEL,
        version="v1",
        status=status,
        outputs=outputs,
        timings={"queued_at": now, "batch_ms": 4.2},
        created_at=now,
        completed_at=now if status == "done" else None,
        expires_at=int(now) + 3600,
        work_expires_at=now + 300 if status == "queued" else None,
        worker="bench-worker",
    )


class Meter:
    """The emulator's CPU and the client's wall time, by operation, over the calls
    each measured block made (a block may add to an operation's earlier ones)."""

    def __init__(self, pid: int, counted: Counted) -> None:
        self.pid = pid
        self.counted = counted
        self._sums: dict[str, list[float]] = {}  # name -> [calls, direct, cpu s, wall s]
        self._notes: dict[str, str] = {}

    def measure(self, name: str, calls: Callable[[], Any], note: str = "") -> Any:
        """``calls`` (the operation ``name``, made some number of times), metered;
        what it returns."""
        self.counted.calls = self.counted.direct = 0
        cpu_before, began = cpu_seconds(self.pid), time.perf_counter()
        value = calls()
        wall_s, cpu_s = time.perf_counter() - began, cpu_seconds(self.pid) - cpu_before
        sums = self._sums.setdefault(name, [0, 0, 0.0, 0.0])
        for i, amount in enumerate((self.counted.calls, self.counted.direct, cpu_s, wall_s)):
            sums[i] += amount
        if note:
            self._notes[name] = note
        return value

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        rows = {}
        for name, (n, direct, cpu_s, wall_s) in self._sums.items():
            rows[name] = {
                "calls": int(n),
                "emulator_cpu_us_per_call": round(1e6 * cpu_s / n, 1) if n else None,
                "client_wall_us_per_call": round(1e6 * wall_s / n, 1) if n else None,
                "direct": n > 0 and direct == n,
                "note": self._notes.get(name, ""),
            }
        return rows


def _sqs_ops(emu: Emulator, sqs: Any, meter: Meter, n: int) -> None:
    """A worker's cycle, ``n`` times over a backlog of ``10 n`` messages in three
    tenants' groups: receive 10, extend their visibility, delete them."""
    queue = SqsWorkQueue(sqs, emu.provisioned.queues[MODEL]["realtime"], "realtime")
    meter.measure(
        "SendMessage",
        lambda: [queue.send(BODY, f"tenant-{i % 3}") for i in range(n)],
        "SqsWorkQueue.send: a body, a MessageGroupId",
    )
    for i in range(9 * n):  # ten messages for each receive
        queue.send(BODY, f"tenant-{i % 3}")
    for _ in range(n):
        batch = meter.measure(
            "ReceiveMessage of 10",
            lambda: queue.receive(10, 0, 120),
            "SqsWorkQueue.receive(10, wait 0, visibility 120) from a backlog",
        )
        meter.measure(
            "ChangeMessageVisibilityBatch of 10",
            lambda b=batch: queue.set_visibility(b, 60),
            "SqsWorkQueue.set_visibility",
        )
        meter.measure(
            "DeleteMessageBatch of 10", lambda b=batch: queue.delete(b), "SqsWorkQueue.delete"
        )
    meter.measure(
        "ReceiveMessage, empty",
        lambda: [queue.receive(10, 0) for _ in range(n)],
        "SqsWorkQueue.receive(10, wait 0) from an empty queue: counted apart",
    )


def _dynamodb_ops(emu: Emulator, ddb: Any, meter: Meter, n: int) -> None:
    names = emu.provisioned.names
    payloads = S3PayloadStore(emu.client("s3"), names.payloads_bucket)
    results = DynamoDBResultStore(ddb, names.results_table, payloads, 200_000)
    stream = DynamoDBTokenStream(ddb, names.results_table)
    counts = DynamoDBQueuedCounts(ddb, names.results_table)
    cache = DynamoDBResultCache(ddb, names.results_table)
    run = uuid.uuid4().hex[:8]
    queued = [_record(f"{run}-q{i}", "queued") for i in range(25 * n)]
    meter.measure(
        "PutItem, conditional",
        lambda: [results.put_queued(r) for r in queued[:n]],
        "DynamoDBResultStore.put_queued: a queued record, attribute_not_exists",
    )
    for r in queued[n:]:
        results.put_queued(r)
    done = [_record(r.request_id, "done", EMBEDDING) for r in queued]
    meter.measure(
        "BatchExecuteStatement of 25 updates",
        lambda: [
            results.complete_batch(done[i : i + 25], [False] * 25) for i in range(0, 25 * n, 25)
        ],
        "DynamoDBResultStore.complete_batch: a done result over each queued record",
    )
    new = [_record(f"{run}-n{i}", "done", EMBEDDING) for i in range(25 * n)]
    meter.measure(
        "BatchExecuteStatement of 25 inserts",
        lambda: [
            results.complete_batch(new[i : i + 25], [True] * 25) for i in range(0, 25 * n, 25)
        ],
        "DynamoDBResultStore.complete_batch: a new done result (its embedding packed, binary)",
    )
    meter.measure(
        "GetItem",
        lambda: [results.get(TENANT, r.request_id) for r in new[:n]],
        "DynamoDBResultStore.get: a done result",
    )
    keys = [(TENANT, r.request_id) for r in new]
    meter.measure(
        "BatchGetItem, 1 key",
        lambda: [results.get_many([k]) for k in keys[:n]],
        "DynamoDBResultStore.get_many: a whole record, ConsistentRead",
    )
    meter.measure(
        "BatchGetItem, 16 keys",
        lambda: [results.get_many(keys[i : i + 16]) for i in range(0, 16 * n, 16)],
        "DynamoDBResultStore.get_many: whole records",
    )
    meter.measure(
        "BatchGetItem, 16 keys, statuses",
        lambda: [results.statuses(keys[i : i + 16]) for i in range(0, 16 * n, 16)],
        "DynamoDBResultStore.statuses: projected to key and status",
    )
    chunks = [Chunk(start=8 * i, ids=list(range(8)), pieces=["tok"] * 8) for i in range(n)]
    expires = int(time.time()) + 3600
    meter.measure(
        "PutItem, token chunk",
        lambda: [stream.put(TENANT, f"{run}-s", c, expires) for c in chunks],
        "DynamoDBTokenStream.put: a chunk of 8 tokens, attribute_not_exists",
    )
    counting = emu.client("dynamodb").get_paginator("query")
    pages = counting.paginate(
        TableName=names.results_table,
        KeyConditionExpression=f"{RESULTS.partition} = :t",
        ExpressionAttributeValues={":t": {"S": TENANT}},
        Select="COUNT",
    )
    held = sum(page["Count"] for page in pages)  # moto pages by 1 MB, as DynamoDB
    meter.measure(
        "Query, 4 chunks",
        lambda: [stream.after(TENANT, f"{run}-s", 8 * (n - 4)) for _ in range(n)],
        f"DynamoDBTokenStream.after: the last 4 chunks of a stream, in a partition of "
        f"{held:,} items (the tenant's results and chunks)",
    )
    meter.measure(
        "BatchGetItem, 16 chunks",
        lambda: [
            stream.at([(TENANT, f"{run}-s", 8 * ((i + j) % n)) for j in range(16)])
            for i in range(n)
        ],
        "DynamoDBTokenStream.at: the next chunks of 16 streams",
    )
    lease = queued_lease(TENANT, MODEL, time.time() + 300)
    meter.measure(
        "UpdateItem, conditional counter",
        lambda: [counts.take([(lease, 10 * n)], time.time()) for _ in range(n)],
        "DynamoDBQueuedCounts.take: ADD under a cap, ReturnValues ALL_NEW",
    )
    entries = [
        CacheEntry(TENANT, MODEL, "v1", f"{run}-k{i}", EMBEDDING, expires) for i in range(25 * n)
    ]
    meter.measure(
        "BatchWriteItem of 25",
        lambda: [cache.put(entries[i : i + 25]) for i in range(0, 25 * n, 25)],
        "DynamoDBResultCache.put: cached outputs (packed, binary)",
    )


def run(quick: bool, calls: int | None = None) -> dict[str, Any]:
    """Each operation made ``calls`` times (by default 2,000; 300 ``quick``)."""
    n = calls or (300 if quick else 2_000)
    with emulator() as emu:
        counted = Counted()
        sqs, ddb = emu.client("sqs"), emu.client("dynamodb")
        for client in (sqs, ddb):
            client.meta.events.register("after-call", counted.after_call)
        meter = Meter(emu.pid, counted)
        # Warm-up: the first calls of each kind fill caches the rest reuse.
        warm = Meter(emu.pid, Counted())
        _sqs_ops(emu, sqs, warm, 5)
        _dynamodb_ops(emu, ddb, warm, 5)
        _sqs_ops(emu, sqs, meter, n)
        _dynamodb_ops(emu, ddb, meter, n)
    return {"calls_per_operation": n, "region": REGION, "operations": meter.rows}
