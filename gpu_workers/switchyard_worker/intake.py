"""The intake: receive, decode and validate the next batch while the model runs the
one before.

Its thread receives what the forming batch has room for and stops once the batch is
full (one batch ahead at most, so memory stays bounded); then it reads which of the
batch's requests are answered already, so the model need not wait for that read
between two batches. A second thread, the realtime watcher, long-polls the realtime
lane while a job's chunks fill the worker, so a realtime request runs after the part
in progress, not after the chunks in hand.

The forming batch (``BatchAssembler``) sits between this stage and the model, under
one condition: the intake adds to it and the model's thread takes from it
(``take_due``), and each tells the other. The intake also knows when the running
batch is expected to end, so it can look at the queue once more just before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from pydantic import ValidationError

from switchyard.fields import FieldError
from switchyard.payloads import PayloadMissing, PayloadStore
from switchyard.queues import Received, decode_checked, decode_messages, load_inputs
from switchyard.results import ResultStore
from switchyard.schemas import ErrorInfo, TensorSignature, TextSignature
from switchyard.signatures import check_each, plainly_valid_texts
from switchyard_worker.batching import BatchAssembler, Message, Pending, rank
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.stages import log, pause
from switchyard_worker.tensors import row_bytes, rows_of
from switchyard_worker.versions import ServedVersions
from switchyard_worker.work_messages import WorkMessage, read_plain

RECEIVE_MAX = 10  # messages per receive (SQS's most)
SHUT_WAIT_SECONDS = 0.25  # an intake whose overflow gate is shut looks again this soon
_WATCH_WAIT_S = 1  # the realtime watcher's long poll: short, as it holds no batch up
# While the model runs a batch and the next is due, the intake looks at the queue
# once more this long before the running batch is expected to end, so that what
# arrived meanwhile joins the next batch rather than the one after it.
_LOOK_BEFORE_END_S = 0.005


def read_messages(
    received: list[Received],
    arrived: float,
    received_at: float,
    *,
    model: str,
    versions: ServedVersions,
    payloads: PayloadStore,
) -> list[Pending]:
    """A receive's messages decoded (one parse of their bodies together) and their
    inputs checked against their versions' signatures (one check per version); what
    fails is kept as its request's error (or, undecodable, as no message at all:
    there is no request id to answer). While every version read so far takes the
    same tensors, the inline inputs are checked as they are parsed, and need no
    second pass."""
    bodies = [r.body for r in received]
    signature = _one_tensor_signature(versions)
    # Plain messages are read by msgspec (``work_messages``); a job's chunks, and any
    # receive that fails there, by pydantic-core, which names what is wrong.
    read = read_plain(bodies, signature)
    if read is not None:
        whole = _read_whole(received, read, arrived, received_at, model, versions, signature)
        if whole is not None:
            return whole
    pendings = [Pending(received=r, arrived=arrived, received_at=received_at) for r in received]
    if read is None and signature is not None:
        read = decode_checked(bodies, signature)
    checked = read is not None and signature is not None
    to_check: dict[str, list[Pending]] = {}  # by version
    messages: Sequence[Message | ValidationError] = read or decode_messages(bodies)
    for pending, message in zip(pendings, messages, strict=True):
        if isinstance(message, ValidationError):
            # Undecodable: no request id to answer. Left for retries, then the DLQ.
            log.error(
                "undecodable message",
                extra={"id": pending.received.message_id, "error": str(message)},
            )
            continue
        pending.message = message
        if message.model != model or versions.get(message.version) is None:
            pending.error = ErrorInfo(
                code="unknown_version",
                message=f"{message.model} {message.version} is not served by this worker",
            )
            continue
        try:
            if message.tensor is not None:
                pending.inputs, pending.size = message.tensor, message.n_inputs
            else:
                pending.inputs = inputs = load_inputs(message, payloads)
                pending.size = len(inputs)
        except (PayloadMissing, ValueError) as exc:
            pending.error = ErrorInfo(code="invalid_input", message=str(exc), field="inputs")
            continue
        to_check.setdefault(message.version, []).append(pending)
    for version, group in to_check.items():
        record = versions.get(version)
        assert record is not None
        # A block of numbers is checked as JSON rows are, to name what fails in it.
        inputs = [
            rows_of(p.inputs, p.size).tolist() if type(p.inputs) is bytes else p.inputs
            for p in group
        ]
        # Rows parsed as the signature's are checked, unless a claim check's were read.
        rows_checked = (
            checked
            and record.signature == signature
            and all(p.message is not None and p.message.inputs is not None for p in group)
        )
        each = check_each(
            inputs, record.signature, record.max_inputs_per_request, rows_checked=rows_checked
        )
        for pending, problems in zip(group, each, strict=True):
            if problems:
                pending.inputs, pending.size = None, 1
                pending.error = invalid_input(problems)
    return pendings


def invalid_input(problems: Sequence[FieldError]) -> ErrorInfo:
    """A request's error for inputs off its signature: the first problem named."""
    first = problems[0]
    return ErrorInfo(
        code="invalid_input", message=f"{first.field} {first.message}", field=first.field
    )


def _read_whole(
    received: list[Received],
    read: list[WorkMessage],
    arrived: float,
    received_at: float,
    model: str,
    versions: ServedVersions,
    parsed_as: TensorSignature | None,
) -> list[Pending] | None:
    """A receive whose messages all passed msgspec's parse, checked as a whole: each
    holds its inputs inline, for this model and a version served, within the
    version's inputs per request; and they are valid for their version, their rows
    checked by the parse (its signature ``parsed_as``) or its texts checked here in
    one pass. Then nothing is left to check message by message; None if any is not
    so, for :func:`read_messages` to check each and name what fails."""
    most: dict[str, int] = {}
    row_sizes: dict[str, int] = {}  # a tensor version's bytes a row, in a block
    for name, version in {(m.model, m.version) for m in read}:
        record = versions.get(version)
        if name != model or record is None:
            return None
        signature = record.signature
        if signature is not parsed_as and signature != parsed_as:
            inline = [m.inputs for m in read if m.version == version and m.inputs is not None]
            if isinstance(signature, TextSignature):
                if not plainly_valid_texts(inline, signature.max_chars):
                    return None
            elif inline:  # JSON rows not parsed as this signature's (blocks are read below)
                return None
        most[version] = record.max_inputs_per_request
        if isinstance(signature, TensorSignature):
            row_sizes[version] = row_bytes(signature)
    for m in read:
        if (m.inputs is None and m.tensor is None) or m.n_inputs > most[m.version]:
            return None
    inputs: list[Any] = [m.inputs for m in read]
    if any(m.tensor is not None for m in read) and not _blocks_read(read, inputs, row_sizes):
        return None
    # A message holds n_inputs inputs, inline or in its block (``one_payload``).
    return [
        Pending(r, arrived, received_at, m, i, m.n_inputs)
        for r, m, i in zip(received, read, inputs, strict=True)
    ]


def _blocks_read(read: list[WorkMessage], inputs: list[Any], row_sizes: dict[str, int]) -> bool:
    """The messages' blocks of numbers (``tensor``) kept in ``inputs``, in their
    places, each holding its rows at its version's tensor signature's length
    (``row_sizes``: bytes a row, by version; their values are checked with their
    batch's, ``switchyard_worker.tensors``); False if any is not so, or its version
    takes no tensor (each message is then read and checked alone)."""
    for i, m in enumerate(read):
        if m.tensor is None:
            continue
        size = row_sizes.get(m.version)
        if size is None or len(m.tensor) != m.n_inputs * size:
            return False
        inputs[i] = m.tensor
    return True


def _one_tensor_signature(versions: ServedVersions) -> TensorSignature | None:
    """The tensor signature every version read so far has (None: none read yet, or
    not one tensor signature among them)."""
    known = versions.known()
    first = known[0].signature if known else None
    # Compared by identity first: a version's record is read once, and pydantic's
    # comparison of two signatures costs a microsecond, at every receive.
    if not isinstance(first, TensorSignature) or any(
        r.signature is not first and r.signature != first for r in known
    ):
        return None
    return first


class Intake:
    """Receives and decodes work into the forming batch; hands the model's thread the
    next batch once it is due."""

    def __init__(
        self,
        *,
        model: str,
        in_hand: MessagesInHand,
        versions: ServedVersions,
        payloads: PayloadStore,
        results: ResultStore,
        stopping: threading.Event,
        poll_wait_seconds: int,
        on_hold: Callable[[], None] | None = None,
        gate: Callable[[], bool] | None = None,
        weights: Mapping[str, int] | None = None,
    ) -> None:
        self._model = model
        # A model a CPU pool takes on overflow: received from only while this says so
        # (``switchyard_worker.overflow``); what is in hand is run either way.
        self._gate = gate
        # Told whenever work joins the forming batch (a pool's loop, which watches
        # every model's intake).
        self._on_hold = on_hold
        self._in_hand = in_hand
        self._versions = versions
        self._payloads = payloads
        self._results = results
        self._stopping = stopping
        self.poll_wait = poll_wait_seconds
        self._batch_waiting = False  # the batch lane's last look found work
        # Each tenant's weight in a batch (WorkerSettings.tenant_weights).
        self.assembler = BatchAssembler(versions.limits, weights=weights or {})
        # Guards the assembler between the intake's threads and the model's; each
        # tells the other through it (a batch added, a batch taken).
        lock = threading.RLock()
        self._held = threading.Condition(lock)
        # The realtime watcher waits on a condition of its own, over the same lock,
        # told of a change only while batch-lane work is held: it has nothing to do
        # otherwise (``watches_realtime``). Woken at every receive, it cost 0.6 µs of
        # each of digits-cnn's one-input requests.
        self._watch = threading.Condition(lock)
        # The batch the model runs (under ``_held``): how many were started, and when
        # the running one is expected to end (monotonic; None while the model is idle);
        # and the batch before whose end the intake last looked at the queue.
        self._started = 0
        self._running_until: float | None = None
        self._looked_before_end = 0

    # -- the intake's threads ----------------------------------------------------

    def run(self) -> None:
        """The intake thread: receive and decode what the forming batch has room for,
        while the model runs the one before; once it is full, read which of its
        requests are answered already."""
        while not self._stopping.is_set():
            with self._held:
                full = self.room() <= 0
                to_read = self.assembler.held_unread() if full else []
                if full and not to_read:
                    self._held.wait(0.05)  # until the model's thread takes a batch
                    continue
            if not to_read and not self.gate_open():
                pause(self._stopping, SHUT_WAIT_SECONDS)
                continue
            try:
                if to_read:
                    self.read_statuses(to_read)
                else:
                    self.receive()
            except Exception:  # noqa: BLE001 - the next turn tries again
                log.exception("receive failed")
                pause(self._stopping, 1.0)

    def watch_realtime(self) -> None:
        """The realtime watcher thread: while the work in hand is all batch lane and the
        intake has stopped receiving (the next batch is full), long-poll the realtime
        lane, so that a request arriving then runs after the part of a job's chunk in
        progress, not after the chunks in hand."""
        while not self._stopping.is_set():
            with self._held:
                if not self.watches_realtime():
                    self._watch.wait(0.05)
                    continue
            if not self.gate_open():
                pause(self._stopping, SHUT_WAIT_SECONDS)
                continue
            try:
                self.look_at_realtime(_WATCH_WAIT_S)
            except Exception:  # noqa: BLE001 - the next turn tries again
                log.exception("receive failed")
                pause(self._stopping, 1.0)

    def gate_open(self) -> bool:
        """Whether this intake may receive now: always, but for a model a CPU pool
        takes on overflow only while its gate is open."""
        return self._gate is None or self._gate()

    def watches_realtime(self) -> bool:
        """Whether the realtime lane is watched: batch-lane work is in hand and the
        intake has stopped receiving (the next batch is full). Realtime work already
        in hand, waiting for the part in progress, does not stop it, up to a batch of
        it: a second request arriving meanwhile is taken then, not after the first
        has run (at 4 req/s beside a job, a twentieth of them waited so in the queue,
        50-80 ms)."""
        a, oldest = self.assembler, self.assembler.oldest
        if oldest is None or not a.holds_batch_lane or self.room() > 0:
            return False
        max_size, _ = self._versions.limits(oldest.version)
        return a.realtime_inputs < max_size

    def look_at_realtime(self, wait_s: float) -> None:
        """Take the realtime work that arrives within ``wait_s``: it runs ahead of the
        batch-lane work in hand."""
        realtime = self._in_hand.lanes[0]
        self.hold(realtime.receive(RECEIVE_MAX, wait_s, self._in_hand.visibility))

    def receive(self) -> None:
        """Receive what the forming batch has room for. Idle, long-poll the realtime
        lane, then look at the batch lane; while the batch lane has work, only glance
        at the realtime lane (no wait) before taking more of it, so a batch backlog
        drains at the model's speed and realtime still goes first. While a batch
        forms and the last look found the queue drained, let arrivals gather until
        the batch is due and look once more: at most one empty receive per batch,
        and no leftovers beyond its room."""
        held = self.assembler.oldest is not None
        if held and self.assembler.drained:
            self._await_due()
        # A realtime batch forming from a backlog (the last look found all it asked
        # for) asks for its whole room at once: calls of ten, sent together. Any other
        # look asks for ten at most, so that a shallow queue costs no empty receives.
        oldest = self.assembler.oldest
        wide = oldest is not None and oldest.received.lane != "batch"
        wide = wide and not self.assembler.drained
        room = max(1, self.room() if wide else min(RECEIVE_MAX, self.room()))
        realtime, batch_lane = self._in_hand.lanes
        visibility = self._in_hand.visibility  # held for this long, extended by heartbeat
        wait = 0 if held or self._batch_waiting else self.poll_wait
        received = realtime.receive(room, wait, visibility)
        if not received and not held:
            received = batch_lane.receive(room, 0, visibility)
            self._batch_waiting = bool(received)
        self.assembler.drained = len(received) < room
        self.hold(received)

    def _await_due(self) -> None:
        """The last look found the queue drained: let arrivals gather until the
        forming batch is due. If it is due already (the model is busy with the batch
        before), look once more shortly before that batch is expected to end, so what
        arrived meanwhile runs in the next batch, not in the one after; after that,
        wait until the forming batch is taken."""
        left = self.assembler.time_left()
        if left > 0:
            pause(self._stopping, left)
            return
        with self._held:
            if self.assembler.oldest is None or self.assembler.time_left() > 0:
                return
            if self._running_until is not None and self._looked_before_end < self._started:
                self._looked_before_end = self._started
                ahead = self._running_until - _LOOK_BEFORE_END_S - time.monotonic()
                if ahead > 0:
                    self._held.wait(ahead)
                return
            started, oldest = self._started, self.assembler.oldest
            while not self._stopping.is_set() and self._started == started:
                if self.assembler.oldest is not oldest:
                    return
                self._held.wait(0.25)

    def hold(self, received: list[Received]) -> None:
        """Received messages decoded and added to the forming batch."""
        kept = self.keep(received)
        with self._held:
            self.assembler.add_all(kept)
            self._tell()
        if kept and self._on_hold is not None:
            self._on_hold()

    def keep(self, received: list[Received]) -> list[Pending]:
        """Received messages, held (their visibility extended) and decoded."""
        self._in_hand.hold(received)
        if not received:
            return []
        return read_messages(
            received,
            time.monotonic(),
            time.time(),
            model=self._model,
            versions=self._versions,
            payloads=self._payloads,
        )

    def room(self) -> int:
        """Inputs the oldest held version's batch can still take."""
        oldest = self.assembler.oldest
        if oldest is None:
            return RECEIVE_MAX
        max_size, _ = self._versions.limits(oldest.version)
        return max_size - self.assembler.inputs_of(oldest.version)

    def read_statuses(self, pendings: list[Pending]) -> None:
        """Read the results table's status of each pending request: one read for all."""
        keys = [(p.message.tenant, p.message.request_id) for p in pendings if p.message]
        statuses = self._results.statuses(keys) if keys else {}
        for p in pendings:
            if p.message is not None:
                p.status = statuses.get((p.message.tenant, p.message.request_id), "queued")

    def _tell(self) -> None:
        """(Under the lock.) The forming batch changed: the threads waiting on it look
        again, the realtime watcher only while it has something to watch."""
        self._held.notify_all()
        if self.assembler.holds_batch_lane:
            self._watch.notify_all()

    # -- the model's side ----------------------------------------------------------

    def take_due(self) -> list[Pending]:
        """The next batch once it is due (full, or its oldest message has waited its
        version's ``max_wait_ms``); otherwise wait a little for the intake and return
        nothing."""
        with self._held:
            batch = self.assembler.take(force=False)
            if not batch:
                left = self.assembler.time_left() if self.assembler.oldest else 0.05
                self._held.wait(min(max(left, 0.001), 0.05))
                return []
            self._tell()
        return batch

    def take(self, force: bool) -> list[Pending]:
        """The next batch if one is due (or ``force``), without waiting."""
        with self._held:
            batch = self.assembler.take(force=force)
            if batch:
                self._tell()  # room again: the intake receives
        return batch

    def due(self) -> tuple[int, float] | None:
        """Where the next batch stands in a pool worker's line (``batching.rank``),
        if one is due now; None if none is."""
        with self._held:
            if self.assembler.oldest is None or self.assembler.wants_more():
                return None
            return rank(self.assembler.held)

    def time_left(self) -> float:
        """Seconds until the forming batch is due (0: due, or nothing held)."""
        with self._held:
            return self.assembler.time_left() if self.assembler.oldest else 0.0

    def take_realtime(self) -> list[Pending]:
        """The realtime work held now, due or not, to run ahead of a job's chunk."""
        with self._held:
            batch = self.assembler.take_realtime()
            if batch:
                self._tell()  # the watcher looks again at once
        return batch

    def wait_for_realtime(self, part: Future[Any]) -> None:
        """Wait until ``part`` is done or realtime work is held."""
        with self._held:
            while not part.done() and not self.assembler.holds_realtime:
                self._held.wait(0.25)

    def wake(self) -> None:
        """Tell the threads waiting on the forming batch to look again."""
        with self._held:
            self._held.notify_all()
            self._watch.notify_all()

    def part_size(self, max_batch_size: int) -> int:
        with self._held:
            return self.assembler.part_size(max_batch_size)

    def model_started(self, version: str, size: int) -> None:
        """The model starts a batch of ``size`` inputs of ``version``."""
        with self._held:
            self._started += 1
            self._running_until = time.monotonic() + self.assembler.expected(version, size)

    def model_ended(self, version: str, size: int, seconds: float | None) -> None:
        """The model's batch ended: after ``seconds`` in the model (None: it failed)."""
        with self._held:
            self._running_until = None
            if seconds is not None:
                self.assembler.ran(version, size, seconds)

    def wants_more(self) -> bool:
        return self.assembler.wants_more()

    def drain(self) -> list[Pending]:
        """Everything held and not started, for release on shutdown."""
        with self._held:
            return self.assembler.drain()
