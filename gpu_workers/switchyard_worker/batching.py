"""The batching core: which messages in hand run together, and when.

Pure logic with an injectable clock, so every rule is unit-tested without queues:
- a batch holds one model version and at most ``max_batch_size`` inputs;
- it is flushed when full or when its oldest message has waited ``max_wait_ms``;
- messages are taken round-robin across tenants, oldest first within a tenant, so
  one tenant's burst cannot fill every batch while another waits;
- a message that was delivered before (a retry) runs alone, so a poison message
  cannot drag its neighbours to the DLQ with it;
- realtime work held beside batch-lane work runs first: a batch job's chunks in
  hand wait for the realtime requests that arrived after them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard.queues import Received
from switchyard.schemas import ErrorInfo, QueueMessage


@dataclass
class Pending:
    """A received message, decoded as far as it could be."""

    received: Received
    arrived: float  # monotonic time of receipt
    received_at: float  # epoch time of receipt, for the result's timings
    message: QueueMessage | None = None
    inputs: list[Any] | None = None
    # Set when the message is malformed for its own reasons: it gets an error result.
    error: ErrorInfo | None = None

    @property
    def size(self) -> int:
        return len(self.inputs) if self.inputs is not None else 1

    @property
    def tenant(self) -> str:
        if self.message is not None:
            return self.message.tenant
        return self.received.group or ""

    @property
    def version(self) -> str:
        return self.message.version if self.message is not None else ""

    @property
    def is_retry(self) -> bool:
        return self.received.receive_count > 1


Limits = Callable[[str], tuple[int, float]]
"""A version's (max_batch_size, max_wait seconds), from its registry record."""


@dataclass
class BatchAssembler:
    limits: Limits
    clock: Callable[[], float] = time.monotonic
    _pool: list[Pending] = field(default_factory=list)

    def add(self, pending: Pending) -> None:
        self._pool.append(pending)

    @property
    def held(self) -> list[Pending]:
        return list(self._pool)

    @property
    def holds_only_batch_lane(self) -> bool:
        """Work in hand, all of it from the batch lane."""
        return bool(self._pool) and all(p.received.lane == "batch" for p in self._pool)

    @property
    def held_inputs(self) -> int:
        return sum(p.size for p in self._pool)

    def wants_more(self) -> bool:
        """True while the oldest version's batch is neither full nor due."""
        if not self._pool:
            return True
        oldest = self._pool[0]
        max_size, _ = self.limits(oldest.version)
        same = sum(p.size for p in self._pool if p.version == oldest.version)
        return same < max_size and self.time_left() > 0

    def time_left(self) -> float:
        """Seconds until the oldest held message's batch is due (0 when idle)."""
        if not self._pool:
            return 0.0
        _, max_wait = self.limits(self._pool[0].version)
        return self._pool[0].arrived + max_wait - self.clock()

    def take(self, force: bool = False) -> list[Pending]:
        """The next batch if one is due (or ``force``), else an empty list."""
        if not self._pool or (not force and self.wants_more()):
            return []
        realtime = [p for p in self._pool if p.received.lane != "batch"]
        oldest = realtime[0] if realtime else self._pool[0]
        if oldest.is_retry or oldest.message is None:
            self._pool.remove(oldest)
            return [oldest]
        candidates = [
            p
            for p in self._pool
            if p.version == oldest.version
            and p.received.lane == oldest.received.lane
            and not p.is_retry
            and p.message is not None
        ]
        by_tenant: dict[str, list[Pending]] = {}
        for p in candidates:
            by_tenant.setdefault(p.tenant, []).append(p)
        max_size, _ = self.limits(oldest.version)
        batch: list[Pending] = []
        inputs = 0
        queues = list(by_tenant.values())
        while queues:
            for q in list(queues):
                p = q[0]
                if batch and inputs + p.size > max_size:
                    queues.remove(q)
                    continue
                batch.append(q.pop(0))
                inputs += p.size
                if not q:
                    queues.remove(q)
        for p in batch:
            self._pool.remove(p)
        return batch

    def drain(self) -> list[Pending]:
        """Everything held and not started, for release on shutdown."""
        pool, self._pool = self._pool, []
        return pool
