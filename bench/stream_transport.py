"""How a streamed generation's tokens could travel from the worker to the router,
measured on the local emulator with the platform's own code where it has it.

Each transport carries the same streams: ``STREAMS`` at once, each ``CHUNKS``
chunks written ``GAP_S`` apart (a worker's flush interval), and a reader per stream
that passes each chunk on as soon as it sees it. Measured per transport: the delay
from a chunk's write to its reader having it (p50, p99), the calls each stream
cost (writer and reader), the setup a stream needs before its first chunk, and the
emulator's CPU per chunk.

- ``results table, Query per stream``: ``DynamoDBTokenStream`` chunks, each reader
  polling its own range every 50 ms (``TokenReader`` without a hub);
- ``results table, hub``: the same chunks, read by the router's ``StreamHub`` (one
  BatchGetItem of every stream's next chunk per 50 ms), as the platform does;
- ``SQS reply queue per stream``: a queue made for each stream (CreateQueue), the
  worker sending each chunk, the reader long-polling it, the queue deleted at the end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import percentile
from bench.emulator import Emulator, emulator
from bench.proc_cpu import cpu_seconds

STREAMS = 8
CHUNKS = 20
GAP_S = 0.05


class _Counted:
    """A boto3 client whose calls are counted, by operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_") or name in ("exceptions", "meta"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return call


def _results_table(emu: Emulator, hub: bool) -> dict[str, Any]:
    from switchyard.generation import Chunk, DynamoDBTokenStream
    from switchyard.results import DynamoDBResultStore
    from switchyard_router.streaming import Piece, StreamHub, TokenReader

    ddb = _Counted(emu.client("dynamodb"))
    table = emu.provisioned.names.results_table
    tokens = DynamoDBTokenStream(ddb, table)
    results = DynamoDBResultStore(ddb, table, None, 8192)  # type: ignore[arg-type]
    shared = StreamHub(tokens) if hub else None
    delays: list[float] = []
    written: dict[tuple[str, int], float] = {}
    lock = threading.Lock()

    def write(rid: str) -> None:
        for i in range(CHUNKS):
            chunk = Chunk(i, [i], [f"{i} "])
            if i == CHUNKS - 1:
                chunk.finish_reason, chunk.usage = "length", {"completion_tokens": CHUNKS}
            with lock:
                written[(rid, i)] = time.monotonic()
            tokens.put("bench", rid, chunk, int(time.time()) + 3600)
            time.sleep(GAP_S)

    def read(rid: str) -> None:
        reader = TokenReader(tokens, results, "bench", rid, hub=shared)

        def passed_on(items: Any) -> None:
            for item in items:  # each as it comes
                if isinstance(item, Piece):
                    with lock:
                        delays.append(time.monotonic() - written[(rid, item.index)])

        passed_on(reader.first(time.monotonic() + 30) or [])
        passed_on(reader.rest(time.monotonic() + 60))

    return _run_streams(emu, write, read, delays, ddb.calls, setup=None)


def _reply_queues(emu: Emulator) -> dict[str, Any]:
    sqs = _Counted(emu.client("sqs"))
    delays: list[float] = []
    setups: list[float] = []
    urls: dict[str, str] = {}
    lock = threading.Lock()
    ready: dict[str, threading.Event] = {}

    def setup(rid: str) -> None:
        began = time.monotonic()
        urls[rid] = sqs.create_queue(QueueName=f"reply-{rid}")["QueueUrl"]
        with lock:
            setups.append(time.monotonic() - began)
        ready[rid].set()

    def write(rid: str) -> None:
        ready[rid].wait(30)
        for i in range(CHUNKS):
            sqs.send_message(QueueUrl=urls[rid], MessageBody=f"{i} {time.monotonic()!r}")
            time.sleep(GAP_S)

    def read(rid: str) -> None:
        ready[rid].wait(30)
        seen = 0
        while seen < CHUNKS:
            got = sqs.receive_message(QueueUrl=urls[rid], MaxNumberOfMessages=10, WaitTimeSeconds=1)
            now = time.monotonic()
            messages = got.get("Messages", [])
            for m in messages:
                with lock:
                    delays.append(now - float(m["Body"].split()[1]))
            if messages:
                sqs.delete_message_batch(
                    QueueUrl=urls[rid],
                    Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                             for n, m in enumerate(messages)],
                )  # fmt: skip
            seen += len(messages)
        sqs.delete_queue(QueueUrl=urls[rid])

    def prepare(rid: str) -> None:
        ready[rid] = threading.Event()
        threading.Thread(target=setup, args=(rid,)).start()

    measured = _run_streams(emu, write, read, delays, sqs.calls, setup=prepare)
    measured["setup_ms_p50"] = round(percentile(setups, 50) * 1000, 2) if setups else None
    return measured


def _run_streams(
    emu: Emulator,
    write: Callable[[str], None],
    read: Callable[[str], None],
    delays: list[float],
    calls: dict[str, int],
    setup: Callable[[str], None] | None,
) -> dict[str, Any]:
    ids = [uuid.uuid4().hex for _ in range(STREAMS)]
    cpu_before = cpu_seconds(emu.pid)
    began = time.monotonic()
    threads = []
    for rid in ids:
        if setup is not None:
            setup(rid)
        threads += [threading.Thread(target=write, args=(rid,)),
                    threading.Thread(target=read, args=(rid,))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wall = time.monotonic() - began
    chunks = STREAMS * CHUNKS
    return {
        "chunks": chunks,
        "delivered": len(delays),
        "delay_ms_p50": round(percentile(delays, 50) * 1000, 1) if delays else None,
        "delay_ms_p99": round(percentile(delays, 99) * 1000, 1) if delays else None,
        "calls_per_stream": round(sum(calls.values()) / STREAMS, 1),
        "calls": dict(sorted(calls.items())),
        "emulator_cpu_ms_per_chunk": round((cpu_seconds(emu.pid) - cpu_before) * 1000 / chunks, 2),
        "wall_s": round(wall, 2),
    }


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"streams": STREAMS, "chunks_per_stream": CHUNKS, "gap_ms": GAP_S * 1000}
    with emulator() as emu:
        for name, measure in (
            ("results table, Query per stream", lambda: _results_table(emu, hub=False)),
            ("results table, hub", lambda: _results_table(emu, hub=True)),
            ("SQS reply queue per stream", lambda: _reply_queues(emu)),
        ):
            out[name] = measure()
            log(f"  {name}: {out[name]}")
    return out
