"""The batching core: which messages in hand run together, and when.

Pure logic with an injectable clock, so every rule is unit-tested without queues:
- a batch holds one model version and at most ``max_batch_size`` inputs;
- it is flushed when full or when its oldest message has waited ``max_wait_ms``;
- messages are taken in turns across tenants, oldest first within a tenant, so one
  tenant's burst cannot fill every batch while another waits: a turn takes up to
  the tenant's weight (its tier's ``weight``, 1 unless told) of its messages, the
  tenant of the oldest message first, and turns go round until the batch is full
  or a tenant's next message does not fit (then that tenant sits out the rest of
  this batch); a tenant alone fills the batch. Weights count messages, not inputs:
  the oldest message always rides in its batch, whatever its size, and a tenant's
  multi-input requests are bounded by ``max_inputs_per_request``;
- a message that was delivered before (a retry) runs alone, so a poison message
  cannot drag its neighbours to the DLQ with it;
- realtime work held beside batch-lane work runs first: a batch job's chunks in
  hand wait for the realtime requests that arrived after them;
- sync callers (a ``respond_by``) held beside async work run first, in batches of
  their own: a tenant's sync call waits for the batch running, not behind another
  tenant's async backlog in hand, nor in a batch padded with it; and while sync
  calls come in, async batches are an eighth of ``max_batch_size``, so the batch a
  sync call waits for is a small one.

It adapts to the load (``time_left``): it learns each version's batch cost (time
against size, :class:`BatchCost`) from the batches run, and the rate at which work
arrives (:class:`ArrivalRate`). A forming batch is due early when waiting longer
would make a sync caller's answer late (its ``respond_by`` less the batch's
expected cost), and at once when the queue was found drained and less than one
more message is expected before ``max_wait_ms`` runs out: a lone request is not
held for nothing.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, islice
from operator import is_
from typing import Any

import msgspec

from switchyard.queues import Received
from switchyard.schemas import ErrorInfo, QueueMessage
from switchyard_worker.work_messages import WorkMessage

# A request's message as the intake read it: a plain one by msgspec, a job's chunk
# (or one msgspec could not read) by pydantic; the same fields either way.
Message = QueueMessage | WorkMessage


class Pending(msgspec.Struct):
    """A received message, decoded as far as it could be. A struct, made for every
    message received: it is made in half the time of a dataclass with slots (0.09
    µs against 0.19), its fields read as fast."""

    received: Received
    arrived: float  # monotonic time of receipt
    received_at: float  # epoch time of receipt, for the result's timings
    message: Message | None = None
    # Its inputs: a list of them, or a tensor version's rows as the message carried
    # them, one block of float64 numbers (``switchyard_worker.tensors``); set with
    # ``size``, how many they are (1 while it has none: it takes a place as one).
    inputs: list[Any] | bytes | None = None
    size: int = 1
    # Set when the message is malformed for its own reasons: it gets an error result.
    error: ErrorInfo | None = None
    # Its request's status in the results table, once read ("queued": not answered).
    status: str | None = None

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

    @property
    def respond_by(self) -> float | None:
        """Monotonic time by which a sync caller wants the answer (None: async)."""
        if self.message is None or self.message.respond_by is None:
            return None
        return self.arrived + (self.message.respond_by - self.received_at)


def unread(p: Pending) -> bool:
    """A decoded request whose status in the results table is not read yet."""
    return p.message is not None and p.status is None


class BatchCost:
    """A version's batch time against its size, ``fixed + per_input * size``, fitted
    online by least squares over the recent batches (older ones weigh less)."""

    def __init__(self, decay: float = 0.9) -> None:
        self._decay = decay
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def observe(self, size: int, seconds: float) -> None:
        d = self._decay
        self._w = d * self._w + 1
        self._x = d * self._x + size
        self._y = d * self._y + seconds
        self._xx = d * self._xx + size * size
        self._xy = d * self._xy + size * seconds

    def expected(self, size: int) -> float:
        """Seconds a batch of ``size`` is expected to take (0 before any is seen)."""
        if self._w == 0:
            return 0.0
        mean_x, mean_y = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mean_x * mean_x
        if var <= 1e-9:  # one size seen so far: its cost scaled by size
            return max(mean_y * size / max(mean_x, 1), 0.0)
        slope = (self._xy / self._w - mean_x * mean_y) / var
        return max(mean_y + slope * (size - mean_x), 0.0)


class ArrivalRate:
    """Messages received per second over the last ``window`` seconds."""

    def __init__(self, clock: Callable[[], float], window: float = 2.0) -> None:
        self._clock = clock
        self._window = window
        self._times: deque[float] = deque()

    def add(self, count: int = 1) -> None:
        """``count`` messages arrived now."""
        now = self._clock()
        self._times.extend([now] * count)
        self._trim(now)

    def per_second(self) -> float:
        now = self._clock()
        self._trim(now)
        if not self._times:
            return 0.0
        return len(self._times) / self._window

    def _trim(self, now: float) -> None:
        while self._times and self._times[0] < now - self._window:
            self._times.popleft()


def rank(pendings: list[Pending]) -> tuple[int, float] | None:
    """Where work stands in a pool worker's line, the smallest first (None: no work):
    realtime before batch lane, then the oldest waiting, by when its message was sent
    (when it was received, for a message that cannot be read)."""
    if not pendings:
        return None
    realtime = [p for p in pendings if p.received.lane != "batch"]
    return (0 if realtime else 1, min(_sent_at(p) for p in realtime or pendings))


def _sent_at(p: Pending) -> float:
    return p.message.enqueued_at if p.message is not None else p.received_at


# A runtime that cannot take two calls at once (no ``concurrent_calls``) runs a job's
# chunk in parts with realtime work between them; while realtime work has arrived
# within this many seconds, the parts are an eighth of max_batch_size, so that
# realtime work waits behind less. The job pays for it while realtime comes in
# (minilm-embed run so: ~0.5x of its rate with parts of 4, 0.71x with 8, 0.86x with
# none, against 0.93-0.97x with realtime run beside whole parts; docs/batch-jobs.md).
REALTIME_RECENT_S = 10.0
PART_SHARE_WITH_REALTIME = 8
# Likewise, while a sync caller has been seen within REALTIME_RECENT_S, async work
# runs in batches of an eighth of max_batch_size: a sync call that arrives while one
# runs waits behind a small batch, not a whole one (the noisy-neighbour bench). The
# async work pays for it while sync calls come in, as a job's parts do.

Limits = Callable[[str], tuple[int, float]]
"""A version's (max_batch_size, max_wait seconds), from its registry record."""


@dataclass
class BatchAssembler:
    limits: Limits
    clock: Callable[[], float] = time.monotonic
    # Tenant -> messages a turn takes of it (``WorkerSettings.tenant_weights``; 1
    # for a tenant not named).
    weights: Mapping[str, int] = field(default_factory=dict)
    _pool: list[Pending] = field(default_factory=list)
    # Inputs held per version, and how many held messages have a sync caller: kept
    # as messages come and go, so that the intake's look at the room left and the
    # model's at the time left cost the same however much is held.
    _inputs: dict[str, int] = field(default_factory=dict)
    _sync_held: int = 0
    _batch_lane_held: int = 0  # messages held from the batch lane
    # The last receive found fewer messages than it asked for (set by the worker).
    drained: bool = False
    costs: dict[str, BatchCost] = field(default_factory=dict)
    arrivals: ArrivalRate = field(init=False)
    realtime_seen_at: float | None = None
    sync_seen_at: float | None = None  # the last sync caller's (a respond_by)

    def __post_init__(self) -> None:
        self.arrivals = ArrivalRate(self.clock)

    def add(self, pending: Pending) -> None:
        self.add_all([pending])

    def add_all(self, pendings: list[Pending]) -> None:
        """A receive's messages, held from now."""
        if not pendings:
            return
        self._pool.extend(pendings)
        self.arrivals.add(len(pendings))
        sync = self._count(pendings, 1)
        realtime = [p for p in pendings if p.received.lane != "batch"]
        if realtime:
            self.realtime_seen_at = self.clock()
            if sync and any(p.respond_by is not None for p in realtime):
                self.sync_seen_at = self.realtime_seen_at

    def _count(self, pendings: list[Pending], sign: int) -> int:
        """``pendings`` counted in (1) or out (-1) of what is held; how many of them
        have a sync caller."""
        inputs = self._inputs
        sync = batch_lane = 0
        for p in pendings:
            # Pending's properties, inlined: this runs twice for every message.
            m = p.message
            version = m.version if m is not None else ""
            inputs[version] = inputs.get(version, 0) + sign * p.size
            if m is not None and m.respond_by is not None:
                sync += 1
            if p.received.lane == "batch":
                batch_lane += 1
        self._sync_held += sign * sync
        self._batch_lane_held += sign * batch_lane
        return sync

    def _remove(self, taken: list[Pending]) -> None:
        """``taken`` no longer held."""
        pool = self._pool
        if all(map(is_, pool[: len(taken)], taken)):  # the oldest held, in order
            del pool[: len(taken)]
        else:
            gone = {id(p) for p in taken}
            self._pool = [p for p in pool if id(p) not in gone]
        self._count(taken, -1)

    def inputs_of(self, version: str) -> int:
        """Inputs of ``version`` held."""
        return self._inputs.get(version, 0)

    @property
    def oldest(self) -> Pending | None:
        """The message held longest (None when nothing is held)."""
        return self._pool[0] if self._pool else None

    def part_size(self, max_batch_size: int) -> int:
        """How many of a job's inputs to run at once: ``max_batch_size``, or an eighth
        of it while realtime work comes in (it waits for the part in progress, so a
        smaller part answers it sooner, at some cost to the job's rate)."""
        seen = self.realtime_seen_at
        if seen is not None and self.clock() - seen < REALTIME_RECENT_S:
            return max(1, max_batch_size // PART_SHARE_WITH_REALTIME)
        return max_batch_size

    def ran(self, version: str, size: int, seconds: float) -> None:
        """A batch of ``version`` took ``seconds`` for ``size`` inputs."""
        self.costs.setdefault(version, BatchCost()).observe(size, seconds)

    def expected(self, version: str, size: int) -> float:
        """Seconds a batch of ``size`` inputs of ``version`` is expected to take (0
        before one has run)."""
        cost = self.costs.get(version)
        return cost.expected(size) if cost else 0.0

    @property
    def held(self) -> list[Pending]:
        return list(self._pool)

    def held_unread(self) -> list[Pending]:
        """The requests held whose status in the results table is not read yet (the
        intake reads them while the batch before runs)."""
        # ``unread`` inlined: the intake looks at every message held each time it
        # finds the next batch full.
        return [p for p in self._pool if p.status is None and p.message is not None]

    @property
    def holds_batch_lane(self) -> bool:
        """Some of the work in hand is from the batch lane."""
        return self._batch_lane_held > 0

    @property
    def holds_realtime(self) -> bool:
        """Whether any realtime-lane work is in hand."""
        return any(p.received.lane != "batch" for p in self._pool)

    @property
    def realtime_inputs(self) -> int:
        """Inputs in hand from the realtime lane."""
        return sum(p.size for p in self._pool if p.received.lane != "batch")

    @property
    def held_inputs(self) -> int:
        return sum(p.size for p in self._pool)

    def wants_more(self) -> bool:
        """True while the oldest version's batch is neither full nor due."""
        if not self._pool:
            return True
        oldest = self._pool[0]
        max_size, _ = self.limits(oldest.version)
        return self.inputs_of(oldest.version) < max_size and self.time_left() > 0

    def time_left(self) -> float:
        """Seconds until the oldest held message's batch is due (0 when idle): its
        ``max_wait_ms``, shortened so that the batch, at its expected cost, still
        answers each sync caller by its ``respond_by``, and cut to nothing when the
        queue was drained and not one more message is expected in the time left."""
        if not self._pool:
            return 0.0
        oldest = self._pool[0]
        _, max_wait = self.limits(oldest.version)
        now = self.clock()
        left = oldest.arrived + max_wait - now
        if self._sync_held:
            same = [p for p in self._pool if p.version == oldest.version]
            expected = self.expected(oldest.version, self.inputs_of(oldest.version))
            for p in same:
                respond_by = p.respond_by
                if respond_by is not None:
                    left = min(left, respond_by - expected - now)
        if self.drained and left > 0 and self.arrivals.per_second() * left < 1:
            return 0.0
        return left

    def take(self, force: bool = False) -> list[Pending]:
        """The next batch if one is due (or ``force``), else an empty list."""
        if not self._pool or (not force and self.wants_more()):
            return []
        realtime = [p for p in self._pool if p.received.lane != "batch"]
        # A caller waiting on its answer goes before queued work, whoever queued more
        # (none is looked for while none is held).
        waiting = [p for p in realtime if p.respond_by is not None] if self._sync_held else []
        first = waiting or realtime or self._pool
        oldest = first[0]
        if oldest.is_retry or oldest.message is None:
            self._remove([oldest])
            return [oldest]
        # The oldest message's version and lane, first-time deliveries, by tenant.
        version, lane = oldest.version, oldest.received.lane
        # Each candidate with its size (Pending's properties inlined: this loop and
        # the turns below run for every message).
        by_tenant: dict[str, deque[tuple[Pending, int]]] = {}
        for p in first:
            m, received = p.message, p.received
            if m is None or m.version != version or received.lane != lane:
                continue
            if received.receive_count > 1:  # a retry runs alone
                continue
            q = by_tenant.get(m.tenant)
            if q is None:
                by_tenant[m.tenant] = q = deque()
            q.append((p, p.size))
        max_size, _ = self.limits(version)
        if not waiting and lane != "batch" and self._sync_recent():
            max_size = max(1, max_size // PART_SHARE_WITH_REALTIME)  # async beside sync
        if len(by_tenant) == 1:
            # A tenant alone: its turns take its messages in order until the next does
            # not fit, whatever its weight, the first riding whatever its size.
            [alone] = by_tenant.values()
            ends = list(accumulate(size for _, size in alone))
            fit = max(1, bisect_right(ends, max_size))
            batch = [p for p, _ in islice(alone, fit)]
            self._remove(batch)
            return batch
        batch = []
        inputs = 0
        # Turns in rounds, the oldest message's tenant first: a tenant with more to
        # give goes to the back of the round after its turn.
        weights = self.weights
        turns = deque((q, max(1, weights.get(t, 1))) for t, q in by_tenant.items())
        while turns:
            q, weight = turns.popleft()
            for _ in range(weight):
                p, size = q[0]
                if batch and inputs + size > max_size:
                    q.clear()  # its next does not fit: it sits out this batch
                    break
                q.popleft()
                batch.append(p)
                inputs += size
                if not q:
                    break
            if q:
                turns.append((q, weight))
        self._remove(batch)
        return batch

    def _sync_recent(self) -> bool:
        seen = self.sync_seen_at
        return seen is not None and self.clock() - seen < REALTIME_RECENT_S

    def take_realtime(self) -> list[Pending]:
        """The next batch of realtime work held, due or not (empty if none is held)."""
        return self.take(force=True) if self.holds_realtime else []

    def drain(self) -> list[Pending]:
        """Everything held and not started, for release on shutdown."""
        pool, self._pool = self._pool, []
        self._inputs, self._sync_held, self._batch_lane_held = {}, 0, 0
        return pool
