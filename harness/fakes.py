"""In-memory fakes of the core's interfaces, for unit tests of domain logic and for
the benchmarks that measure the platform's own code with no AWS round trip in the
way (``bench/worker_efficiency.py``, ``bench/cold_start.py``). Integration and e2e
tests use the emulator over its wire protocol instead.

They are thread-safe where the worker needs it: it stores results and deletes
messages on its own threads, and its heartbeat runs beside the loop."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchyard.auth import KeyIdDirectory
from switchyard.costs import Spend, WorkerTime, hour_of
from switchyard.queues import SQS_BATCH_LIMIT, Received
from switchyard.registry import ModelVersion, VersionExists
from switchyard.results import AsStored, Stored
from switchyard.schemas import ErrorInfo, Lane, QueueMessage, ResultRecord
from switchyard.telemetry import LOG_LINES_PER_RECORD, LOG_RECORD_BYTES, log_records
from switchyard_local.gateway import ApiGatewayStandIn, ApiKey

_ids = itertools.count(1)


def answered(message: QueueMessage, output: Any, **timings: float) -> ResultRecord:
    """``message``'s request answered now, ``output`` for each of its inputs, as a
    worker stores it (``timings`` stamped on the record)."""
    return ResultRecord(
        request_id=message.request_id,
        tenant=message.tenant,
        model=message.model,
        version=message.version,
        status="done",
        outputs=[output] * message.n_inputs,
        created_at=message.enqueued_at,
        completed_at=time.time(),
        expires_at=int(message.expires_at),
        timings=timings,
    )


def version_record(model: str, version: str = "v1", manifest: Path | None = None, **update: Any):
    """The registry record the platform would hold for ``model``, from the manifest."""
    from stacks.assets import MANIFEST_FILE
    from switchyard.manifest import load_manifest

    spec = load_manifest(manifest or MANIFEST_FILE).models[model]
    record = spec.version_record(model, version, f"s3://models/{model}/{version}", "0" * 64)
    return record.model_copy(update=update) if update else record


@dataclass
class FakeQueue:
    """A queue with receive counts, visibility and a DLQ, like SQS. With
    ``long_poll`` an empty receive waits for a send (up to its wait), as SQS does;
    ``on_send`` takes each sent body instead of queueing it (an instant worker)."""

    lane: Lane = "realtime"
    max_receive_count: int = 5
    visible: list[dict[str, Any]] = field(default_factory=list)
    in_flight: dict[str, dict[str, Any]] = field(default_factory=dict)
    dead: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    log: list[tuple[str, Any]] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)  # each receive's long-poll wait
    asked: list[int] = field(default_factory=list)  # each receive's most messages
    long_poll: bool = False
    on_send: Callable[[str], None] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def send(self, body: str, group: str) -> None:
        if self.on_send is not None:
            self.on_send(body)
            return
        with self._cond:
            self.visible.append({"body": body, "group": group, "id": f"m{next(_ids)}", "count": 0})
            self._cond.notify()

    def receive(
        self, max_messages: int, wait_seconds: int, visibility_seconds: int | None = None
    ) -> list[Received]:
        self.asked.append(max_messages)
        if wait_seconds > 0:  # a long poll is one call of SQS's, of 10 at most
            max_messages = min(max_messages, SQS_BATCH_LIMIT)
        with self._cond:
            if self.long_poll and not self.visible and wait_seconds > 0:
                self._cond.wait(wait_seconds)
            return self._take(max_messages, wait_seconds)

    def _take(self, max_messages: int, wait_seconds: int) -> list[Received]:
        self.waits.append(wait_seconds)
        out: list[Received] = []
        # Taken off the front in one cut, not one pop at a time: a pop moves the whole
        # backlog behind it, which billed the bench's worker for the queue's length.
        visible, taken = self.visible, 0
        while taken < len(visible) and len(out) < max_messages:
            msg = visible[taken]
            taken += 1
            if msg["count"] >= self.max_receive_count:
                self.dead.append(msg)
                continue
            msg["count"] += 1
            handle = f"{msg['id']}-r{msg['count']}"
            self.in_flight[handle] = msg
            out.append(
                Received(msg["body"], handle, msg["id"], msg["count"], msg["group"], self.lane)
            )
        del visible[:taken]
        return out

    def delete(self, messages: Sequence[Received]) -> None:
        with self._cond:
            for m in messages:
                self.log.append(("delete", m.message_id))
                self.in_flight.pop(m.receipt_handle)
                self.deleted.append(m.message_id)

    def set_visibility(self, messages: Sequence[Received], seconds: int) -> None:
        with self._cond:
            for m in messages:
                self.log.append(("visibility", (m.message_id, seconds)))
                if seconds <= 30:  # a release (retry backoff), not a heartbeat extension
                    msg = self.in_flight.pop(m.receipt_handle, None)
                    if msg is not None:
                        self.visible.append(msg)
                        self._cond.notify()

    @property
    def depth(self) -> int:
        return len(self.visible) + len(self.in_flight)


class FakeRegistry:
    def __init__(self, *records: ModelVersion) -> None:
        self.records = {(r.model, r.version): r for r in records}

    def get(self, model: str, version: str) -> ModelVersion | None:
        return self.records.get((model, version))

    def versions(self, model: str | None = None) -> list[ModelVersion]:
        return [r for (m, _), r in self.records.items() if model is None or m == model]

    def register(self, record: ModelVersion) -> None:
        if (record.model, record.version) in self.records:
            raise VersionExists(record.version)
        self.records[(record.model, record.version)] = record


class FakeResults:
    """Results by (tenant, request id); a final result is written once. It counts the
    final results stored (``done``, ``completed_at``) and can be waited on. Like the
    DynamoDB store it says which results replaced a counted queued record, except
    where :meth:`complete_batch` wrote over a queued one (its UPDATE cannot tell)."""

    def __init__(self, log: list[tuple[str, Any]] | None = None) -> None:
        self.items: dict[tuple[str, str], ResultRecord] = {}
        self.log = log if log is not None else []
        self.completed_at: list[float] = []  # perf_counter of each final result
        self._stored = threading.Condition()

    @property
    def done(self) -> int:
        return len(self.completed_at)

    def wait_for(self, count: int, timeout: float) -> bool:
        """True once ``count`` final results are stored, False after ``timeout``."""
        with self._stored:
            return self._stored.wait_for(lambda: self.done >= count, timeout)

    def put_queued(self, record: ResultRecord) -> bool:
        if (record.tenant, record.request_id) in self.items:
            return False
        self.items[(record.tenant, record.request_id)] = record
        return True

    def complete(self, record: ResultRecord, also: dict | None = None) -> Stored:
        with self._stored:
            stored = self._complete(record, also)
            self._stored.notify_all()
            return stored

    def _complete(self, record: ResultRecord, also: dict | None = None) -> Stored:
        key = (record.tenant, record.request_id)
        current = self.items.get(key)
        if current is not None and current.status != "queued":
            self.log.append(("duplicate", record.request_id))
            return Stored.REFUSED
        self.items[key] = record
        self.log.append(("result", record.request_id))
        self.completed_at.append(time.perf_counter())
        counted = current is not None and current.queued_counted and also is None
        return Stored.OVER_COUNTED if counted else Stored.STORED

    # A batch's results are stored under one hold of the lock, and waiters told once,
    # as a batch's writes are sent together. Records are held as they are: their
    # outputs and docs as an item would hold them (``outputs``) are not needed.
    def complete_batch(
        self, records: list[ResultRecord], new: list[bool], outputs: AsStored | None = None
    ) -> list[Stored]:
        with self._stored:
            for kind, n in (("batch", sum(new)), ("queued-batch", len(new) - sum(new))):
                if n:
                    self.log.append((kind, n))
            stored = [
                self._complete(r) if is_new else self._over_queued(r)
                for r, is_new in zip(records, new, strict=True)
            ]
            self._stored.notify_all()
            return stored

    def _over_queued(self, record: ResultRecord) -> Stored:
        """As the UPDATE over a queued record stores it: STORED, counted or not; any
        other is stored as :meth:`complete` stores it."""
        current = self.items.get((record.tenant, record.request_id))
        stored = self._complete(record)
        return Stored.STORED if stored and current is not None else stored

    def get(self, tenant: str, request_id: str) -> ResultRecord | None:
        return self.items.get((tenant, request_id))

    def mark_failed(self, queued: ResultRecord, reason: str) -> None:
        key = (queued.tenant, queued.request_id)
        current = self.items.get(key, queued)
        if current.status == "queued":
            self.items[key] = current.model_copy(
                update={
                    "failures": current.failures + 1,
                    "last_failure": f"{queued.version}: {reason}",
                }
            )
        self.log.append(("failure", queued.request_id))

    def statuses(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        self.log.append(("statuses", len(keys)))
        return {k: self.items[k].status for k in keys if k in self.items}

    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], ResultRecord]:
        self.log.append(("get_many", len(keys)))
        return {k: self.items[k] for k in keys if k in self.items}

    def cancel(self, tenant: str, request_id: str, at: float) -> ResultRecord | None:
        current = self.items.get((tenant, request_id))
        if current is None or current.status != "queued":
            return current
        self.items[(tenant, request_id)] = current.model_copy(
            update={"status": "cancelled", "completed_at": at}
        )
        return self.items[(tenant, request_id)]

    def expire(self, record: ResultRecord, at: float) -> ResultRecord:
        current = self.items.get((record.tenant, record.request_id))
        if current is not None and current.status == "queued":
            self.items[(record.tenant, record.request_id)] = current.model_copy(
                update={
                    "status": "expired",
                    "completed_at": at,
                    "error": ErrorInfo(code="expired", message="the request expired"),
                }
            )
        return self.items.get((record.tenant, record.request_id), record)

    def reopen(self, tenant: str, request_id: str) -> bool:
        return False


class FakeResultCache:
    """Cached outputs by (tenant, model, version, key); every read and write logged."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str, str], Any] = {}
        self.log: list[tuple[str, Any]] = []

    def get(self, tenant: str, model: str, version: str, key: str) -> list[Any] | None:
        self.log.append(("get", (tenant, model, version)))
        entry = self.entries.get((tenant, model, version, key))
        return None if entry is None or entry.expires_at <= time.time() else entry.outputs

    def put(self, entries: list[Any]) -> int:
        self.log.append(("put", len(entries)))
        for e in entries:
            self.entries[(e.tenant, e.model, e.version, e.key)] = e
        return len(entries)


class FakeCostLedger:
    """The cost ledger's two sums, in memory: each group's spend, and each write of a
    worker's time (``switchyard.costs.CostLedger``)."""

    def __init__(self) -> None:
        self.spend: dict[tuple[str, str, str], Spend] = {}
        self.times: list[WorkerTime] = []

    def add_spend(self, groups: dict[tuple[str, str, str], Spend], at: float) -> None:
        for group, s in groups.items():
            self.spend.setdefault(group, Spend()).merge(s)

    def add_time(
        self,
        service: str,
        worker: str,
        *,
        running_seconds: float,
        busy_seconds: float,
        usd_per_hour: float,
        at: float,
    ) -> None:
        self.times.append(
            WorkerTime(service, worker, hour_of(at), running_seconds, busy_seconds, usd_per_hour)
        )


class DroppedPredictionLog:
    """Takes prediction-log records and keeps only their count: the worker still pays
    for building them and writing them as the stream's records
    (``switchyard.telemetry.log_records``), as it does on the platform."""

    def __init__(self) -> None:
        self.records = 0

    def write(self, records: list[Any]) -> None:
        log_records(records, LOG_LINES_PER_RECORD, LOG_RECORD_BYTES)
        self.records += len(records)


class FakePayloads:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}  # values, or JSON text stored as such

    def put_json(self, key: str, value: Any) -> str:
        uri = f"s3://payloads/{key}"
        self.objects[uri] = value
        return uri

    def put_json_text(self, key: str, text: bytes) -> str:
        uri = f"s3://payloads/{key}"
        self.objects[uri] = bytes(text)
        return uri

    def get_json(self, uri: str, byte_range: str | None = None) -> Any:
        from switchyard.payloads import PayloadMissing

        if uri not in self.objects:
            raise PayloadMissing(uri)
        value = self.objects[uri]
        if not isinstance(value, bytes):
            return value
        if byte_range:
            first, last = (int(n) for n in byte_range.split("-"))
            value = value[first : last + 1]
        return json.loads(value)


def key_id(tenant: str) -> str:
    """The API key id a test's tenant has (API Gateway's ids are opaque)."""
    return f"id-{tenant}"


def tenant_keys(keys: dict[str, str]) -> KeyIdDirectory:
    """The router's directory for ``keys`` (key value -> tenant)."""
    return KeyIdDirectory({tenant: key_id(tenant) for tenant in keys.values()})


def behind_api_gateway(app: Any, keys: dict[str, str]) -> ApiGatewayStandIn:
    """``app`` behind the local platform's API Gateway stand-in holding ``keys`` (key
    value -> tenant), with no usage plan: it checks the key and passes its id on."""
    known = {value: ApiKey(key_id(tenant), None) for value, tenant in keys.items()}
    return ApiGatewayStandIn(app, known.get)


class EchoRuntime:
    """A model for logic tests: echoes the length of each input; switchable faults."""

    def __init__(self, fail: bool = False, drop_one: bool = False) -> None:
        self.fail = fail
        self.drop_one = drop_one
        self.calls: list[list[Any]] = []

    def predict(self, inputs: list[Any]) -> list[Any]:
        self.calls.append(list(inputs))
        if self.fail:
            raise RuntimeError("model exploded")
        outputs = [{"n": len(x)} for x in inputs]
        return outputs[:-1] if self.drop_one else outputs


def worker_over_fakes(
    record: ModelVersion,
    runtime: Any,
    *,
    realtime: FakeQueue | None = None,
    batch: FakeQueue | None = None,
    results: FakeResults | None = None,
    preload: bool = True,
    **more: Any,
) -> Any:
    """A worker of ``record``'s model over the fakes, as the logic tests run one:
    ``runtime`` answers its version (loaded unless not ``preload``), worker ``w1``,
    no long polls, messages held 60 s, the realtime queue's receive limit; ``more``
    are the other ``Worker`` arguments a test needs (a cache, queued work, a token
    stream)."""
    from switchyard_worker.worker import Worker

    realtime = realtime if realtime is not None else FakeQueue("realtime")
    more = {"visibility_timeout": 60, "max_receive_count": realtime.max_receive_count, **more}
    worker = Worker(
        model=record.model,
        worker_id="w1",
        realtime=realtime,
        batch=batch if batch is not None else FakeQueue("batch"),
        registry=FakeRegistry(record),
        results=results if results is not None else FakeResults(),
        payloads=FakePayloads(),
        load_runtime=lambda _record: runtime,
        poll_wait_seconds=0,
        **more,
    )
    if preload:
        worker.preload()
    return worker


class FakeTokenStream:
    """Chunks by (tenant, request id), in token order; a chunk is written once."""

    def __init__(self, log: list[tuple[str, Any]] | None = None) -> None:
        self.chunks: dict[tuple[str, str], dict[int, Any]] = {}
        self.log = log if log is not None else []

    def put(self, tenant: str, request_id: str, chunk: Any, expires_at: int) -> bool:
        mine = self.chunks.setdefault((tenant, request_id), {})
        if chunk.start in mine:
            return False
        mine[chunk.start] = chunk
        self.log.append(("chunk", request_id))
        return True

    def put_many(self, writes: list[Any]) -> list[bool]:
        self.log.append(("put_many", len(writes)))
        return [self.put(w.tenant, w.request_id, w.chunk, w.expires_at) for w in writes]

    def after(self, tenant: str, request_id: str, index: int) -> list[Any]:
        self.log.append(("after", request_id))
        mine = self.chunks.get((tenant, request_id), {})
        return [mine[start] for start in sorted(mine) if start >= index]

    def at(self, places: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Any]:
        self.log.append(("at", len(places)))
        return {
            (t, r, n): self.chunks[(t, r)][n]
            for t, r, n in places
            if n in self.chunks.get((t, r), {})
        }


class CharTokenizer:
    """One token per character (ids are code points); token 0 ends the text."""

    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids if i)


class ScriptDecoder:
    """A decoder for logic tests: each sequence writes out ``script`` from where its
    completion stands (so a resumed sequence continues it), one character a step;
    ``fail_at_step`` makes a step raise."""

    context_length = 512

    def __init__(self, script: str, fail_at_step: int | None = None) -> None:
        self.tokenizer = CharTokenizer()
        self.script = script
        self.fail_at_step = fail_at_step
        self.steps: list[list[str]] = []  # the sequences of each step
        self.resets = 0

    def next_tokens(self, sequences: list[Any]) -> list[int]:
        self.steps.append([s.key for s in sequences])
        if self.fail_at_step is not None and len(self.steps) == self.fail_at_step:
            raise RuntimeError("decode step exploded")
        return [ord(self.script[len(s.ids) % len(self.script)]) for s in sequences]

    def reset(self) -> None:
        self.resets += 1


class GenerativeRuntime:
    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def predict(self, inputs: list[Any]) -> list[Any]:
        raise TypeError("generative")
