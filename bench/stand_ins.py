"""In-memory stand-ins for the core's AWS interfaces (queues, registry, results,
payloads, tenants), so that a section can measure the platform's own code with no
emulator or network in the way. They are thread-safe: the worker writes results
from a thread pool and its heartbeat runs beside the loop."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stacks.assets import MANIFEST_FILE
from switchyard.manifest import load_manifest
from switchyard.queues import Received
from switchyard.registry import ModelVersion
from switchyard.schemas import Lane, ResultRecord

_ids = itertools.count(1)
FAKE_SHA = "0" * 64


def version_record(model: str, version: str = "v1", manifest: Path | None = None, **update: Any):
    """The registry record the platform would hold for ``model``, from the manifest."""
    spec = load_manifest(manifest or MANIFEST_FILE).models[model]
    record = spec.version_record(model, version, f"s3://bench/{model}/{version}", FAKE_SHA)
    return record.model_copy(update=update) if update else record


class MemoryQueue:
    """A work queue in memory: receive hands out up to ``max_messages`` and, when
    empty, waits up to ``wait_seconds`` for a send, like an SQS long poll."""

    def __init__(self, lane: Lane = "realtime") -> None:
        self.lane: Lane = lane
        self._visible: deque[tuple[str, str, str]] = deque()
        self._cond = threading.Condition()
        self.sent = 0
        self.deleted = 0
        self.receives = 0
        self.on_send: Callable[[str], None] | None = None

    def send(self, body: str, group: str) -> None:
        if self.on_send is not None:
            self.on_send(body)
            return
        with self._cond:
            self._visible.append((body, group, f"m{next(_ids)}"))
            self.sent += 1
            self._cond.notify()

    def receive(self, max_messages: int, wait_seconds: int) -> list[Received]:
        with self._cond:
            self.receives += 1
            if not self._visible and wait_seconds > 0:
                self._cond.wait(wait_seconds)
            out = []
            while self._visible and len(out) < max_messages:
                body, group, mid = self._visible.popleft()
                out.append(Received(body, f"{mid}-r1", mid, 1, group, self.lane))
            return out

    def delete(self, messages: Sequence[Received]) -> None:
        with self._cond:
            self.deleted += len(messages)

    def set_visibility(self, messages: Sequence[Received], seconds: int) -> None:
        return None

    @property
    def depth(self) -> int:
        return len(self._visible)


class MemoryRegistry:
    def __init__(self, *records: ModelVersion) -> None:
        self.records = {(r.model, r.version): r for r in records}

    def get(self, model: str, version: str) -> ModelVersion | None:
        return self.records.get((model, version))

    def versions(self, model: str | None = None) -> list[ModelVersion]:
        return [r for (m, _), r in self.records.items() if model is None or m == model]

    def register(self, record: ModelVersion) -> None:
        self.records[(record.model, record.version)] = record


class MemoryResults:
    """Results by (tenant, request id); ``done`` counts final results, and
    ``all_done`` is set once ``expect`` of them are in."""

    def __init__(self, expect: int = 0) -> None:
        self.items: dict[tuple[str, str], ResultRecord] = {}
        self._lock = threading.Lock()
        self.done = 0
        self.expect = expect
        self.all_done = threading.Event()
        self.completed_at: list[float] = []

    def put_queued(self, record: ResultRecord) -> None:
        with self._lock:
            self.items[(record.tenant, record.request_id)] = record

    def complete(self, record: ResultRecord, also: dict | None = None) -> bool:
        with self._lock:
            key = (record.tenant, record.request_id)
            current = self.items.get(key)
            if current is not None and current.status != "queued":
                return False
            self.items[key] = record
            self.done += 1
            self.completed_at.append(time.perf_counter())
            if self.expect and self.done >= self.expect:
                self.all_done.set()
            return True

    def get(self, tenant: str, request_id: str) -> ResultRecord | None:
        return self.items.get((tenant, request_id))


class MemoryPayloads:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def put_json(self, key: str, value: Any) -> str:
        uri = f"s3://bench-payloads/{key}"
        self.objects[uri] = value
        return uri

    def get_json(self, uri: str) -> Any:
        return self.objects[uri]


class DroppedPredictionLog:
    """Takes the worker's prediction-log records and keeps only their count, so the
    worker still pays for building them, as it does on the platform."""

    def __init__(self) -> None:
        self.records = 0

    def write(self, records: list[dict[str, Any]]) -> None:
        self.records += len(records)
