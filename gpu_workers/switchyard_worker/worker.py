"""The worker loop: long-poll, micro-batch, run, store results, then delete.

Delivery is at-least-once, so the order of effects is what keeps it exact:
1. a result is written (conditionally: only over ``queued``) before its message is
   deleted, so a crash between the two only causes a redelivery that writes nothing;
2. per-item problems (malformed message, inputs that fail the signature, a missing
   claim check, an unknown version) become error results, and work past its expiry
   an ``expired`` one, without running or retrying; a request that already has its
   final result (cancelled, or answered by a fallback or before a crash) is deleted
   without running: one read of the results table per batch tells;
3. an exception for the whole batch (the model raised, or returned the wrong number
   of outputs) releases its messages for retry, and retried messages run alone. On
   a message's last allowed receive (``maxReceiveCount``) the worker first writes
   the request's final error (``retries_exhausted``), then releases it, and SQS
   moves it to the DLQ, from where ``switchyard dlq redrive`` can bring it back;
4. messages in hand have their visibility extended while they wait or run;
5. SIGTERM stops polling, finishes the batch in hand, releases what is not started,
   and waits for the results of finished batches to be stored.

A batch's results are stored and its messages deleted on their own thread, in
batch order, while the model runs the next batch (``stages.InOrder``).

A generative model's worker batches continuously instead (``generation``): a
receiver thread long-polls while the running batch has room, and the main loop
lets arrivals join between decode steps. A streamed request's tokens are written
as chunks (``switchyard.generation``) as they come, the first at once and then at
most every ``stream_flush_seconds``, on their own thread and in order, the last one
before the result. A redelivered streamed request continues from the tokens its
chunks hold. Its messages are held with a short visibility
(``generation_visibility_seconds``, extended while they run), so a request whose
worker died is taken up again within seconds.
"""

from __future__ import annotations

import functools
import queue as stdlib_queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools import Logger
from pydantic import ValidationError

from switchyard.generation import (
    Chunk,
    TokenStream,
    as_request,
    over_context,
    tokens_written,
)
from switchyard.jobs import STOPPED, Job, JobStore, finish_if_answered
from switchyard.payloads import PayloadMissing, PayloadStore
from switchyard.queues import Received, WorkQueue, load_inputs
from switchyard.registry import ModelVersion, Registry
from switchyard.result_cache import CacheEntry, ResultCache
from switchyard.results import ResultStore
from switchyard.schemas import (
    RETRIES_EXHAUSTED,
    ErrorInfo,
    GenerationSignature,
    QueueMessage,
    ResultRecord,
)
from switchyard.signatures import check_inputs
from switchyard.telemetry import COUNT, MILLISECONDS, PredictionLog, emit_metrics, prediction_record
from switchyard_worker.batching import BatchAssembler, Pending
from switchyard_worker.generation import Continuous, Sequence
from switchyard_worker.runtimes import (
    GENERATIVE_RUNTIMES,
    ModelRuntime,
    OutputCountMismatch,
    size_order,
)
from switchyard_worker.stages import InOrder

log = Logger(service="switchyard-worker")

RuntimeLoader = Callable[[ModelVersion], ModelRuntime]
_RECEIVE_MAX = 10
_WRITERS = 8  # result writes in flight at once
_INSERTS = 25  # results per write (DynamoDB's BatchExecuteStatement takes 25)
_WATCH_WAIT_S = 1  # the realtime watcher's long poll: short, as it holds no batch up
_JOB_STATUS_SECONDS = 2.0  # how stale a job's cancelled-or-not may be
_PAUSE_SLICE_S = 0.02  # how soon a pause notices a stop
# While the model runs a batch and the next is due, the intake looks at the queue
# once more this long before the running batch is expected to end, so that what
# arrived meanwhile joins the next batch rather than the one after it.
_LOOK_BEFORE_END_S = 0.005


class BatchFailed(Exception):
    """The model failed a whole batch; every message in it goes back for retry."""


class Worker:
    def __init__(
        self,
        *,
        model: str,
        worker_id: str,
        realtime: WorkQueue,
        batch: WorkQueue,
        registry: Registry,
        results: ResultStore,
        payloads: PayloadStore,
        load_runtime: RuntimeLoader,
        cache: ResultCache | None = None,
        visibility_timeout: int,
        poll_wait_seconds: int = 1,
        prediction_log: PredictionLog | None = None,
        emit: bool = True,
        max_receive_count: int = 5,
        result_ttl_seconds: int = 86_400,
        jobs: JobStore | None = None,
        job_output_s3: Any = None,
        job_ended: Callable[[Job], None] | None = None,
        stream: TokenStream | None = None,
        stream_flush_seconds: float = 0.05,
        generation_visibility_seconds: int = 10,
    ) -> None:
        self.model = model
        self.worker_id = worker_id
        self._lanes = (realtime, batch)
        self._registry = registry
        self._results = results
        self._cache = cache
        self._payloads = payloads
        self._load_runtime = load_runtime
        self._visibility = visibility_timeout
        self._poll_wait = poll_wait_seconds
        self._batch_waiting = False  # the batch lane's last look found work
        self._prediction_log = prediction_log
        self._emit_enabled = emit
        self._max_receives = max_receive_count
        self._result_ttl = result_ttl_seconds
        # Batch jobs: each chunk's result is counted on its job as it is stored; the
        # worker that stores a job's last chunk assembles its output (on its own
        # thread, waited for before the worker exits).
        self._jobs = jobs
        self._job_output_s3 = job_output_s3
        self._job_ended = job_ended  # asks for an ended job's callback
        self._job_outputs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-output")
        # A job's part runs here when its runtime takes calls from two threads at once
        # (``concurrent_calls``), so that realtime work arriving meanwhile runs beside
        # it on the main thread instead of waiting for it.
        self._job_parts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-part")
        self._job_status: dict[tuple[str, str], tuple[str, float]] = {}
        self._versions: dict[str, ModelVersion | None] = {}
        self._runtimes: dict[str, ModelRuntime] = {}
        self._assembler = BatchAssembler(self._limits)
        # Guards the assembler between the intake thread and the main thread; each
        # tells the other through it (a batch added, a batch taken).
        self._held = threading.Condition()
        # The batch the model runs (under ``_held``): how many were started, and when
        # the running one is expected to end (monotonic; None while the model is idle);
        # and the batch before whose end the intake last looked at the queue.
        self._started = 0
        self._running_until: float | None = None
        self._looked_before_end = 0
        self._stopping = threading.Event()
        self._in_hand: dict[str, Received] = {}
        self._in_hand_lock = threading.Lock()
        self._writers = ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="result-writer")
        # Metrics are printed (EMF) on their own thread, off the model's critical path.
        self._metrics = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")
        self._finisher = InOrder(self._finish, name="result-finisher")
        self.batches_run = 0
        # Generative models (continuous batching): the running batch per version,
        # what the receiver thread has taken in, the messages being generated, and
        # the thread that writes their token streams.
        self.generative = False
        self._stream = stream
        self._stream_flush = stream_flush_seconds
        self._generation_visibility = generation_visibility_seconds
        self._batches: dict[str, Continuous] = {}
        self._arrivals: stdlib_queue.Queue[Pending] = stdlib_queue.Queue()
        self._generating: dict[str, _Generating] = {}
        # One write in flight per stream (so each stream's chunks land in order), up
        # to this many streams' writes at once.
        self._stream_writer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stream-writer")

    # -- lifecycle ---------------------------------------------------------------

    def preload(self) -> None:
        """Load every active version now, so the first request does not pay for it."""
        for record in self._registry.versions(self.model):
            self._versions[record.version] = record
            if record.runtime in GENERATIVE_RUNTIMES:
                self.generative = True
                self._visibility = self._generation_visibility
            if record.status == "active":
                try:
                    self._runtime(record)
                except Exception:  # noqa: BLE001 - a bad version must not stop the others
                    log.exception("preload failed", extra={"version": record.version})

    def stop(self, *_: Any) -> None:
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until stopped. Two threads take turns at the model's pace: the intake
        receives, decodes and validates the next batch while this thread runs the
        model on the current one (a generative model's receiver feeds its running
        batch instead)."""
        heartbeat = threading.Thread(target=self._heartbeat, name="visibility", daemon=True)
        heartbeat.start()
        taker = self._take_in if self.generative else self._intake
        intake = threading.Thread(target=taker, name="intake", daemon=True)
        intake.start()
        watcher = None
        if not self.generative:
            watcher = threading.Thread(target=self._watch_realtime, name="intake-rt", daemon=True)
            watcher.start()
        if ready:
            ready()
        log.info("polling", extra={"model": self.model, "worker": self.worker_id})
        try:
            while not self._stopping.is_set():
                if self.generative:
                    self._generation_step()
                else:
                    self._run_next_batch()
            while self.generative and self._generating_now():
                self._generation_step()  # SIGTERM: the running batch finishes
            intake.join(self._poll_wait + 30)  # nothing more is added once it is back
            if watcher is not None:
                watcher.join(self._poll_wait + 30)
        finally:
            self._release_arrivals()
            self._stream_writer.shutdown(wait=True)
            leftover = self._assembler.drain()
            self._release([p.received for p in leftover], 0)
            self._finisher.close()
            self._writers.shutdown(wait=True)
            self._metrics.shutdown(wait=True)
            self._job_outputs.shutdown(wait=True)
            self._job_parts.shutdown(wait=True)
            log.info(
                "stopped",
                extra={
                    "worker": self.worker_id,
                    "released": len(leftover),
                    "batches": self.batches_run,
                },
            )

    # -- the pipeline: intake beside the model -----------------------------------

    def _intake(self) -> None:
        """The intake thread: receive and decode what the forming batch has room for,
        while the main thread runs the one before. It stops taking more once the
        forming batch is full (one batch ahead at most, so memory stays bounded), and
        then reads which of its requests are answered already, so that the model
        need not wait for that read between two batches; the realtime watcher looks
        at the realtime lane meanwhile."""
        while not self._stopping.is_set():
            with self._held:
                full = self._room() <= 0
                unread = [p for p in self._assembler.held if _unread(p)] if full else []
                if full and not unread:
                    self._held.wait(0.05)  # until the main thread takes a batch
                    continue
            try:
                if unread:
                    self._read_statuses(unread)
                else:
                    self._receive()
            except Exception:  # noqa: BLE001 - the next turn tries again
                log.exception("receive failed")
                self._pause(1.0)

    def _run_next_batch(self) -> None:
        """Take the next batch once it is due (full, or its oldest message has waited
        its version's ``max_wait_ms``) and run it; otherwise wait for the intake."""
        with self._held:
            batch = self._assembler.take(force=False)
            if not batch:
                left = self._assembler.time_left() if self._assembler.held else 0.05
                self._held.wait(min(max(left, 0.001), 0.05))
                return
            self._held.notify_all()
        self._execute(batch)

    def step(self) -> None:
        """One turn on this thread alone (the unit tests' handle on the loop): receive
        what the pending batch still wants, or look at the realtime lane as the
        realtime watcher would; run the batch when due."""
        if self.generative:
            self._generation_step()
            return
        if self._assembler.wants_more():
            self._receive()
        elif self._watches_realtime():
            self._look_at_realtime(0)  # the realtime watcher's look, without its wait
        batch = self._assembler.take(force=self._stopping.is_set())
        if batch:
            self._execute(batch)

    # -- receiving ---------------------------------------------------------------

    def _receive(self) -> None:
        """Receive what the forming batch has room for. Idle, long-poll the realtime
        lane, then look at the batch lane; while the batch lane has work, only glance
        at the realtime lane (no wait) before taking more of it, so a batch backlog
        drains at the model's speed and realtime still goes first. While a batch
        forms and the last look found the queue drained, let arrivals gather until
        the batch is due and look once more: at most one empty receive per batch,
        and no leftovers beyond its room."""
        held = bool(self._assembler.held)
        if held and self._assembler.drained:
            self._await_due()
        room = max(1, min(_RECEIVE_MAX, self._room()))
        realtime, batch_lane = self._lanes
        received = realtime.receive(room, 0 if held or self._batch_waiting else self._poll_wait)
        if not received and not held:
            received = batch_lane.receive(room, 0)
            self._batch_waiting = bool(received)
        self._assembler.drained = len(received) < room
        self._hold(received)

    def _part_beside_realtime(self, runtime: Any, chunk: list[Any]) -> tuple[list[Any], float]:
        """A job's part, run on the part thread; realtime work that arrives while it
        runs is run on this thread at the same time, not after it (minilm-embed on 2
        cores: a realtime sentence beside a part of 32 answered in 28-31 ms at the
        median, the part's rate 0.97-1.01x of its rate alone)."""
        part = self._job_parts.submit(_timed_predict, runtime, chunk)

        def finished(_: Any) -> None:
            with self._held:
                self._held.notify_all()

        part.add_done_callback(finished)
        while True:
            with self._held:
                while not part.done() and not self._assembler.holds_realtime:
                    self._held.wait(0.25)
            if part.done():
                return part.result()
            self._realtime_first()

    def _realtime_first(self) -> None:
        """Run the realtime work held now, ahead of the rest of a batch-lane batch."""
        with self._held:
            batch = self._assembler.take_realtime()
            if not batch:
                return
            self._held.notify_all()  # the watcher looks again at once
        self._execute(batch)

    def _watch_realtime(self) -> None:
        """The realtime watcher thread: while the work in hand is all batch lane and the
        intake has stopped receiving (the next batch is full), long-poll the realtime
        lane, so that a request arriving then runs after the part of a job's chunk in
        progress, not after the chunks in hand."""
        while not self._stopping.is_set():
            with self._held:
                if not self._watches_realtime():
                    self._held.wait(0.05)
                    continue
            try:
                self._look_at_realtime(_WATCH_WAIT_S)
            except Exception:  # noqa: BLE001 - the next turn tries again
                log.exception("receive failed")
                self._pause(1.0)

    def _watches_realtime(self) -> bool:
        """Whether the realtime lane is watched: batch-lane work is in hand and the
        intake has stopped receiving (the next batch is full). Realtime work already
        in hand, waiting for the part in progress, does not stop it, up to a batch of
        it: a second request arriving meanwhile is taken then, not after the first
        has run (at 4 req/s beside a job, a twentieth of them waited so in the queue,
        50-80 ms)."""
        a = self._assembler
        if not a.holds_batch_lane or self._room() > 0:
            return False
        max_size, _ = self._limits(a.held[0].version)
        return a.realtime_inputs < max_size

    def _look_at_realtime(self, wait_s: float) -> None:
        """Take the realtime work that arrives within ``wait_s``: it runs ahead of the
        batch-lane work in hand."""
        self._hold(self._lanes[0].receive(_RECEIVE_MAX, wait_s))

    def _await_due(self) -> None:
        """The last look found the queue drained: let arrivals gather until the
        forming batch is due. If it is due already (the model is busy with the batch
        before), look once more shortly before that batch is expected to end, so what
        arrived meanwhile runs in the next batch, not in the one after; after that,
        wait until the forming batch is taken."""
        left = self._assembler.time_left()
        if left > 0:
            self._pause(left)
            return
        with self._held:
            if not self._assembler.held or self._assembler.time_left() > 0:
                return
            if self._running_until is not None and self._looked_before_end < self._started:
                self._looked_before_end = self._started
                ahead = self._running_until - _LOOK_BEFORE_END_S - time.monotonic()
                if ahead > 0:
                    self._held.wait(ahead)
                return
            started, oldest = self._started, self._assembler.held[0]
            while not self._stopping.is_set() and self._started == started:
                held = self._assembler.held
                if not held or held[0] is not oldest:
                    return
                self._held.wait(0.25)

    def _hold(self, received: list[Received]) -> None:
        kept = self._keep(received)
        with self._held:
            for pending in kept:
                self._assembler.add(pending)
            self._held.notify_all()

    def _keep(self, received: list[Received]) -> list[Pending]:
        """Received messages, held (their visibility extended) and decoded."""
        now_mono, now = time.monotonic(), time.time()
        with self._in_hand_lock:
            for r in received:
                self._in_hand[r.receipt_handle] = r
        return [self._decode(r, now_mono, now) for r in received]

    def _pause(self, seconds: float) -> None:
        """Sleep, waking early once a stop is asked for. Not ``Event.wait``: the SIGTERM
        handler sets that Event on this thread, and would deadlock on the Event's
        lock if the signal landed while this thread held it inside ``wait``."""
        end = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, _PAUSE_SLICE_S))

    def _room(self) -> int:
        """Inputs the oldest held version's batch can still take."""
        held = self._assembler.held
        if not held:
            return _RECEIVE_MAX
        max_size, _ = self._limits(held[0].version)
        return max_size - sum(p.size for p in held if p.version == held[0].version)

    def _decode(self, received: Received, arrived: float, received_at: float) -> Pending:
        pending = Pending(received=received, arrived=arrived, received_at=received_at)
        try:
            pending.message = QueueMessage.model_validate_json(received.body)
        except ValidationError as exc:
            # Undecodable: no request id to answer. Left for retries, then the DLQ.
            log.error("undecodable message", extra={"id": received.message_id, "error": str(exc)})
            return pending
        message = pending.message
        record = self._version(message.version)
        if message.model != self.model or record is None:
            pending.error = ErrorInfo(
                code="unknown_version",
                message=f"{message.model} {message.version} is not served by this worker",
            )
            return pending
        try:
            inputs = load_inputs(message, self._payloads)
        except (PayloadMissing, ValueError) as exc:
            pending.error = ErrorInfo(code="invalid_input", message=str(exc), field="inputs")
            return pending
        problems = check_inputs(inputs, record.signature, record.max_inputs_per_request)
        if problems:
            first = problems[0]
            pending.error = ErrorInfo(
                code="invalid_input", message=f"{first.field} {first.message}", field=first.field
            )
            return pending
        pending.inputs = inputs
        return pending

    # -- running -----------------------------------------------------------------

    def _execute(self, batch: list[Pending]) -> None:
        answered, runnable = self._triage(batch)
        if runnable:
            try:
                outputs = self._run(runnable)
            except BatchFailed as failed:
                self._failed(runnable, str(failed))
            else:
                answered.extend(
                    (p, self._record(p, "done", outputs=out, timing=timing))
                    for p, (out, timing) in zip(runnable, outputs, strict=True)
                )
        if answered:
            self._finisher.submit(answered)
        self.batches_run += 1

    def _triage(
        self, batch: list[Pending]
    ) -> tuple[list[tuple[Pending, ResultRecord]], list[Pending]]:
        """What to answer without running (expired, cancelled, invalid) and what to
        run; undecodable messages are released, those answered already deleted."""
        undecodable = [p for p in batch if p.message is None]
        if undecodable:
            self._release([p.received for p in undecodable], 0)
        now = time.time()
        answered: list[tuple[Pending, ResultRecord]] = []
        runnable: list[Pending] = []
        for p in self._skip_answered([p for p in batch if p.message is not None]):
            assert p.message is not None
            if p.error is None and now > p.message.expires_at:
                error = ErrorInfo(code="expired", message="the request expired before it ran")
                answered.append((p, self._record(p, "expired", error=error)))
            elif p.message.job is not None and self._job_cancelled(p.message):
                error = ErrorInfo(code="cancelled", message="the job was cancelled")
                answered.append((p, self._record(p, "cancelled", error=error)))
            elif p.error is not None:
                answered.append((p, self._record(p, "error", error=p.error)))
            else:
                runnable.append(p)
        return answered, runnable

    def _failed(self, runnable: list[Pending], reason: str) -> None:
        """A failed batch: each request's attempt is counted and its message released
        for retry; on its last allowed receive the request's final error is written
        first (its message goes to the DLQ on the next receive)."""
        last = [p for p in runnable if p.received.receive_count >= self._max_receives]
        for p in runnable:
            m = p.message
            assert m is not None
            if p in last:
                error = ErrorInfo(
                    code=RETRIES_EXHAUSTED,
                    message=f"failed after {p.received.receive_count} attempts: {reason}",
                )
                self._complete(self._record(p, "error", error=error))
                log.warning(
                    "retries exhausted; the message goes to the DLQ",
                    extra={"request_id": m.request_id, "attempts": p.received.receive_count},
                )
            else:
                self._results.mark_failed(self._queued(p), reason)
        retry = [p for p in runnable if p not in last]
        if retry:
            self._release([p.received for p in retry], self._backoff(retry))
        if last:
            self._release([p.received for p in last], 0)

    def wait_for_results(self) -> None:
        """Return once every finished batch's results are stored and its messages
        deleted."""
        self._finisher.flush()

    def _finish(self, answered: list[tuple[Pending, ResultRecord]]) -> None:
        """Store, log, then delete (on the finisher thread). If the store fails, the
        messages are released at once for another try rather than held."""
        try:
            self._store_and_delete(answered)
        except Exception:  # noqa: BLE001 - the messages go back; the worker goes on
            log.exception("storing results failed; messages released", extra={"n": len(answered)})
            try:
                self._release([p.received for p, _ in answered], 0)
            except Exception:  # noqa: BLE001 - they come back after their visibility timeout
                log.exception("release failed")
                self._forget([p.received for p, _ in answered])

    def _read_statuses(self, pendings: list[Pending]) -> None:
        """Read the results table's status of each pending request: one read for all."""
        keys = [(p.message.tenant, p.message.request_id) for p in pendings if p.message]
        statuses = self._results.statuses(keys) if keys else {}
        for p in pendings:
            if p.message is not None:
                p.status = statuses.get((p.message.tenant, p.message.request_id), "queued")

    def _skip_answered(self, batch: list[Pending]) -> list[Pending]:
        """Requests that already have their final result (cancelled by the caller,
        answered by a fallback, or stored just before a crash) are deleted without
        running; the rest are returned. Their statuses are read at most once per
        batch: on the intake thread while the batch before ran, when the batch was
        full by then, else here. A request answered after that read runs, and its
        result is not stored: every write is conditional on the request being
        unanswered."""
        unread = [p for p in batch if _unread(p)]
        if unread:
            self._read_statuses(unread)
        answered = []
        for p in batch:
            assert p.message is not None
            status = p.status
            if status != "queued":
                answered.append(p)
                log.info(
                    "cancelled; deleted without running"
                    if status == "cancelled"
                    else "duplicate suppressed",
                    extra={
                        "request_id": p.message.request_id,
                        "status": status,
                        "worker": self.worker_id,
                        "receive_count": p.received.receive_count,
                    },
                )
        if answered:
            self._delete([p.received for p in answered])
        return [p for p in batch if p not in answered]

    def _run(self, runnable: list[Pending]) -> list[tuple[list[Any], dict[str, float]]]:
        """Outputs per message; raises BatchFailed if the batch failed as a whole."""
        version = runnable[0].version
        record = self._version(version)
        assert record is not None
        flat = [x for p in runnable for x in (p.inputs or [])]
        batch_lane = runnable[0].received.lane == "batch"
        with self._held:
            self._started += 1
            self._running_until = time.monotonic() + self._assembler.expected(version, len(flat))
        started = time.time()
        computing = 0.0  # seconds in the model (realtime work run in between left out)
        try:
            runtime = self._runtime(record)
            # A job's chunk runs in several parts: sorted by size first, each part
            # pads to a nearer length (a chunk of 64 sentences in two parts of 32:
            # 232 sentences a second in-process, against 214 in the order they came).
            order = size_order(runtime, flat) if batch_lane else None
            work = [flat[j] for j in order] if order else flat
            # Realtime work beside a job's part: run at the same time, where the
            # runtime allows it, or else between smaller parts.
            beside = batch_lane and getattr(runtime, "concurrent_calls", False)
            outputs: list[Any] = []
            i = 0
            while i < len(work):
                size = record.max_batch_size
                if batch_lane:
                    # A job's chunk runs in parts: realtime work that arrived
                    # meanwhile runs between two parts, not after the chunk (and,
                    # unless it runs beside them, the parts are smaller while realtime
                    # work comes in).
                    if i:
                        self._realtime_first()
                    if not beside:
                        with self._held:
                            size = self._assembler.part_size(size)
                chunk = work[i : i + size]
                i += size
                if beside:
                    result, seconds = self._part_beside_realtime(runtime, chunk)
                else:
                    result, seconds = _timed_predict(runtime, chunk)
                computing += seconds
                if len(result) != len(chunk):
                    raise OutputCountMismatch(f"{len(chunk)} inputs gave {len(result)} outputs")
                outputs.extend(result)
            if order:
                in_order: list[Any] = [None] * len(flat)
                for j, output in zip(order, outputs, strict=True):
                    in_order[j] = output
                outputs = in_order
        except Exception as exc:  # noqa: BLE001 - the whole batch goes back for retry
            with self._held:
                self._running_until = None
            log.warning(
                "batch failed; messages released for retry",
                extra={"version": version, "messages": len(runnable), "error": repr(exc)},
            )
            self._emit(version, item_errors=len(runnable))
            raise BatchFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
        compute_ms = computing * 1000
        with self._held:
            self._running_until = None
            self._assembler.ran(version, len(flat), computing)
        per_message = []
        offset = 0
        for p in runnable:
            n = p.size
            timing = {
                "received_at": p.received_at,
                "batch_started_at": started,
                "batch_wait_ms": (started - p.received_at) * 1000,
                "compute_ms": compute_ms,
                "batch_size": float(len(flat)),
            }
            if p.message is not None:
                timing["queue_wait_ms"] = (p.received_at - p.message.enqueued_at) * 1000
            per_message.append((outputs[offset : offset + n], timing))
            offset += n
        queue_wait = [t["queue_wait_ms"] for _, t in per_message if "queue_wait_ms" in t]
        self._emit(
            version,
            batch_size=len(flat),
            compute_ms=compute_ms,
            queue_wait_ms=max(queue_wait) if queue_wait else None,
        )
        return per_message

    def _store_and_delete(self, answered: list[tuple[Pending, ResultRecord]]) -> None:
        if not answered:
            return
        # Sync requests' results (no record yet, unless handed off at the deadline)
        # are inserted 25 to a call, and the other requests' results (over their
        # queued records) updated 25 to a call; a job's chunk is a conditional put
        # with its count on the job, up to _WRITERS at once, each writer storing its
        # share in turn: one task per writer, not per result.
        new, queued, chunks = [], [], []
        for i, (p, r) in enumerate(answered):
            if _unrecorded(p, r):
                new.append(i)
            elif r.job is not None and self._jobs is not None:
                chunks.append(i)
            else:
                queued.append(i)
        tasks = [("new", new[j : j + _INSERTS]) for j in range(0, len(new), _INSERTS)]
        tasks += [("queued", queued[j : j + _INSERTS]) for j in range(0, len(queued), _INSERTS)]
        writers = min(_WRITERS, len(chunks))
        tasks += [("one", chunks[k::writers]) for k in range(writers)]

        def write(task: tuple[str, list[int]]) -> list[bool]:
            how, indexes = task
            records = [answered[i][1] for i in indexes]
            if how == "one":
                return [self._complete(r) for r in records]
            _stamp(records)
            if how == "new":
                return self._results.complete_new(records)
            return self._results.complete_queued(records)

        stored = [False] * len(answered)
        for (_, indexes), done in zip(tasks, self._writers.map(write, tasks), strict=True):
            for i, fresh in zip(indexes, done, strict=True):
                stored[i] = fresh
        # One line per batch, not per request: at a light model's rate a log line per
        # request costs more CPU than the model.
        log.info(
            "results stored",
            extra={
                "worker": self.worker_id,
                "results": [
                    {
                        "request_id": record.request_id,
                        "status": record.status,
                        "receive_count": p.received.receive_count,
                        "stored": fresh,
                    }
                    for (p, record), fresh in zip(answered, stored, strict=True)
                ],
            },
        )
        fresh = [(p, r) for (p, r), new in zip(answered, stored, strict=True) if new]
        self._log_predictions([r for _, r in fresh])
        self._fill_cache(fresh)
        self._delete([p.received for p, _ in answered])

    def _fill_cache(self, stored: list[tuple[Pending, ResultRecord]]) -> None:
        """Cache the outputs of the requests that asked for it (the router set their
        ``cache_key``), for their version's cache time: one write per batch. A cache
        outage loses entries, never results."""
        if self._cache is None:
            return
        now = time.time()
        entries = []
        for p, record in stored:
            m = p.message
            if m is None or m.cache_key is None or record.status != "done" or not record.outputs:
                continue
            version = self._version(m.version)
            if version is None or version.result_cache_seconds <= 0:
                continue
            expires = int(now + version.result_cache_seconds)
            entries.append(
                CacheEntry(m.tenant, m.model, m.version, m.cache_key, record.outputs, expires)
            )
        if not entries:
            return
        try:
            self._cache.put(entries)
        except Exception:  # noqa: BLE001 - the next repeat is run by the model instead
            log.exception("result cache write failed", extra={"entries": len(entries)})

    def _complete(self, record: ResultRecord) -> bool:
        """Store a final result; a job's chunk is counted on its job in the same
        write, and if it was the job's last, the job's output is assembled. The
        record is completed as its write leaves (``completed_at``, not when it was
        built): the router times its looks for results by it."""
        _stamp([record])
        if record.job is None or self._jobs is None:
            return self._results.complete(record)
        count = self._jobs.count_chunk(record)
        fresh = self._results.complete(record, also=count)
        if fresh:
            self._job_outputs.submit(self._finish_job, record.tenant, record.job.job_id)
        return fresh

    def _job_cancelled(self, message: QueueMessage) -> bool:
        """Whether the chunk's job was cancelled or failed (its status read at most every
        :data:`_JOB_STATUS_SECONDS` per job)."""
        if self._jobs is None or message.job is None:
            return False
        key = (message.tenant, message.job.job_id)
        now = time.monotonic()
        cached = self._job_status.get(key)
        if cached is None or now - cached[1] > _JOB_STATUS_SECONDS:
            job = self._jobs.get(*key)
            cached = (job.status if job else "queued", now)
            self._job_status[key] = cached
        return cached[0] in STOPPED

    def _finish_job(self, tenant: str, job_id: str) -> None:
        assert self._jobs is not None
        try:
            job = finish_if_answered(
                self._jobs, tenant, job_id, self._results.get, self._job_output_s3, self._job_ended
            )
        except Exception:  # noqa: BLE001 - the claim's lease lets another try later
            log.exception("job output failed", extra={"job_id": job_id})
            return
        if job is not None:
            log.info(
                "job finished",
                extra={"job_id": job_id, "output_uri": job.output_uri, "lines_ok": job.lines_ok,
                       "lines_failed": job.lines_failed},
            )  # fmt: skip

    def _log_predictions(self, records: list[ResultRecord]) -> None:
        if self._prediction_log is None or not records:
            return
        try:
            self._prediction_log.write([prediction_record(r) for r in records])
        except Exception:  # noqa: BLE001 - a log outage must not hold up results
            log.exception("prediction log write failed", extra={"records": len(records)})

    def _queued(self, p: Pending) -> ResultRecord:
        """The request's queued record, as the router writes it (a sync request in
        flight has none yet)."""
        assert p.message is not None
        return ResultRecord.queued_for(p.message, int(time.time() + self._result_ttl))

    def _record(
        self,
        p: Pending,
        status: str,
        *,
        outputs: list[Any] | None = None,
        error: ErrorInfo | None = None,
        timing: dict[str, float] | None = None,
    ) -> ResultRecord:
        m = p.message
        assert m is not None
        completed = time.time()
        # Validated as built: pydantic-core's validation (~3 µs here) is about half
        # of what model_construct's per-field Python costs.
        return ResultRecord(
            request_id=m.request_id,
            tenant=m.tenant,
            model=m.model,
            version=m.version,
            status=status if status in ("done", "expired", "cancelled") else "error",
            lane=m.lane,
            outputs=outputs,
            error=error,
            timings={**(timing or {"received_at": p.received_at}), "completed_at": completed},
            created_at=m.enqueued_at,
            completed_at=completed,
            job=m.job,
            expires_at=int(completed + self._result_ttl),
            work_expires_at=m.expires_at,
            worker=self.worker_id,
            shadow_of=m.shadow_of,
        )

    # -- generation (continuous batching) ----------------------------------------

    def _take_in(self) -> None:
        """The receiver thread: while the running batches have room, long-poll the
        realtime lane (the batch lane when it is empty) and hand what arrives to the
        main loop, which lets it join between two decode steps."""
        realtime, batch_lane = self._lanes
        while not self._stopping.is_set():
            room = self._generation_room()
            if room <= 0:
                self._pause(0.005)
                continue
            try:
                want = min(room, _RECEIVE_MAX)
                received = realtime.receive(want, self._poll_wait, self._visibility)
                if not received and not self._stopping.is_set():
                    received = batch_lane.receive(want, 0, self._visibility)
            except Exception:  # noqa: BLE001 - the next poll tries again
                log.exception("receive failed")
                self._pause(1.0)
                continue
            for pending in self._keep(received):
                self._arrivals.put(pending)
            if self._stopping.is_set():
                self._release_arrivals()

    def _generation_room(self) -> int:
        """Sequences the running batches can still take, less those waiting to join."""
        active = [v for v in self._versions.values() if v is not None and v.status == "active"]
        capacity = max((v.max_batch_size for v in active), default=1)
        running = sum(len(g.sequences) for g in list(self._generating.values()))
        return capacity - running - self._arrivals.qsize()

    def _generating_now(self) -> bool:
        return any(b.running for b in self._batches.values())

    def _generation_step(self) -> None:
        """Let arrivals join, then advance every running batch by one token."""
        arrivals = []
        try:
            wait = 0 if self._generating_now() else _PAUSE_SLICE_S
            arrivals.append(
                self._arrivals.get(timeout=wait) if wait else self._arrivals.get_nowait()
            )
            while True:
                arrivals.append(self._arrivals.get_nowait())
        except stdlib_queue.Empty:
            pass
        if arrivals and not self._stopping.is_set():
            self._admit(arrivals)
        elif arrivals:
            self._release([p.received for p in arrivals], 0)
        for version, running in list(self._batches.items()):
            if not running.running:
                continue
            record = self._versions.get(version)
            if record is not None and record.faults.get("step_delay_seconds"):
                # A drill's slow model: each decode step takes this much longer.
                time.sleep(float(record.faults["step_delay_seconds"]))
            try:
                ended = running.step()
            except Exception as exc:  # noqa: BLE001 - its requests go back for retry
                self._generation_failed(version, running.abandon(), exc)
                continue
            for sequence in ended:
                self._sequence_ended(sequence)

    def _admit(self, arrivals: list[Pending]) -> None:
        answered, runnable = self._triage(arrivals)
        for p in runnable:
            try:
                sequences, streamer = self._sequences(p)
            except _Refused as refused:
                answered.append((p, self._record(p, "error", error=refused.error)))
                continue
            except Exception as exc:  # noqa: BLE001 - the version did not load, etc.
                self._failed([p], f"{type(exc).__name__}: {exc}"[:300])
                continue
            assert p.message is not None
            work = _Generating(p, sequences, time.time(), streamer)
            self._generating[p.message.request_id] = work
            running = self._batches[p.version]
            for sequence in sequences:
                if sequence.done:  # resumed after its last token: nothing left to run
                    continue
                running.join(sequence)
            if all(sq.done for sq in sequences):
                self._generation_done(work)
        if answered:
            self._finisher.submit(answered)

    def _sequences(self, p: Pending) -> tuple[list[Sequence], _Streamer | None]:
        """The message's inputs as sequences, each checked against the context, and
        the writer of its stream if it is streamed (one input only), which continues
        from the tokens the stream already holds."""
        m = p.message
        assert m is not None and p.inputs is not None
        record = self._version(p.version)
        assert record is not None
        runtime = self._runtime(record)
        decoder = runtime.decoder  # type: ignore[attr-defined]
        if p.version not in self._batches:
            self._batches[p.version] = Continuous(decoder, record.max_batch_size)
        signature = record.signature
        assert isinstance(signature, GenerationSignature)
        sequences = []
        streamer = None
        for i, item in enumerate(p.inputs):
            request = as_request(item)
            prompt = decoder.tokenizer.encode(request.prompt)
            field = f"inputs[{i}]"
            context = min(signature.context_length, decoder.context_length)
            why = over_context(len(prompt), request.max_tokens, context)
            if why:
                raise _Refused(ErrorInfo(code="invalid_input", message=why, field=field))
            key = m.request_id if len(p.inputs) == 1 else f"{m.request_id}/{i}"
            sequence = Sequence(
                key=key, request=request, prompt_ids=prompt, seed=request.seed_for(key)
            )
            if request.stream and len(p.inputs) == 1 and self._stream is not None:
                if p.received.receive_count > 1:  # only a redelivery has a stream to resume
                    self._resume(sequence, m)
                streamer = _Streamer(self, m, sequence)
                sequence.on_token = streamer.on_token
            sequences.append(sequence)
        return sequences, streamer

    def _resume(self, sequence: Sequence, m: QueueMessage) -> None:
        """Continue a streamed request from the tokens already written (a worker that
        ran it before died): they are forced, not sampled again."""
        assert self._stream is not None
        written = tokens_written(self._stream, m.tenant, m.request_id)
        for chunk in written:
            sequence.ids.extend(chunk.ids)
            sequence.pieces.extend(chunk.pieces)
            sequence.finish_reason = chunk.finish_reason
        sequence.emitted = "".join(sequence.pieces)
        if written:
            log.info(
                "stream resumed",
                extra={"request_id": m.request_id, "tokens": len(sequence.ids),
                       "worker": self.worker_id},
            )  # fmt: skip

    def _sequence_ended(self, sequence: Sequence) -> None:
        request_id = sequence.key.split("/")[0]
        work = self._generating.get(request_id)
        if work is not None and all(s.done for s in work.sequences):
            self._generation_done(work)

    def _generation_done(self, work: _Generating) -> None:
        """Store the result; a streamed one after its stream's last chunk."""
        p = work.pending
        m = p.message
        assert m is not None
        self._generating.pop(m.request_id, None)
        first = min((s.first_token_at for s in work.sequences if s.first_token_at), default=None)
        now = time.time()
        batch_size = len(self._batches[p.version].running) + 1  # it has just left
        timing = {
            "received_at": p.received_at,
            "batch_started_at": work.started,
            "queue_wait_ms": (p.received_at - m.enqueued_at) * 1000,
            "compute_ms": (now - work.started) * 1000,
            "batch_size": float(batch_size),
        }
        if first is not None:
            timing["first_token_ms"] = (first - m.enqueued_at) * 1000
        record = self._record(
            p, "done", outputs=[s.output() for s in work.sequences], timing=timing
        )
        store = functools.partial(self._finisher.submit, [(p, record)])
        if work.streamer is not None:
            work.streamer.after_last(store)  # a reader that sees the result has its tokens
        else:
            store()
        self._emit(
            p.version,
            batch_size=batch_size,
            compute_ms=timing["compute_ms"],
            queue_wait_ms=timing["queue_wait_ms"],
        )

    def _generation_failed(self, version: str, sequences: list[Sequence], exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:300]
        log.warning(
            "decode step failed; its requests released for retry",
            extra={"version": version, "sequences": len(sequences), "error": reason},
        )
        failed = []
        for request_id in dict.fromkeys(s.key.split("/")[0] for s in sequences):
            work = self._generating.pop(request_id, None)
            if work is not None:
                failed.append(work.pending)
        if failed:
            self._emit(version, item_errors=len(failed))
            self._failed(failed, reason)

    def _release_arrivals(self) -> None:
        left = []
        try:
            while True:
                left.append(self._arrivals.get_nowait())
        except stdlib_queue.Empty:
            pass
        if left:
            self._release([p.received for p in left], 0)

    def _write_chunk(self, m: QueueMessage, chunk: Chunk, streamer: _Streamer) -> None:
        """On the stream writer: one chunk, once. Another worker's chunk at the same
        place means it holds the request too: this one stops writing its stream."""
        assert self._stream is not None
        if streamer.disowned:
            return
        try:
            if not self._stream.put(
                m.tenant, m.request_id, chunk, int(time.time() + self._result_ttl)
            ):
                streamer.disowned = True
                log.warning("stream written by another worker", extra={"request_id": m.request_id})
        except Exception:  # noqa: BLE001 - the reader falls back to the result's text
            log.exception("stream chunk write failed", extra={"request_id": m.request_id})

    # -- visibility --------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Extend every held message before its visibility runs out."""
        interval = max(self._visibility / 3, 1)
        while not self._stopping.wait(interval):
            with self._in_hand_lock:
                held = list(self._in_hand.values())
            for queue, mine in self._by_lane(held):
                try:
                    queue.set_visibility(mine, self._visibility)
                except Exception:  # noqa: BLE001 - retried on the next beat
                    log.exception("visibility extension failed")

    def _by_lane(self, messages: list[Received]) -> list[tuple[WorkQueue, list[Received]]]:
        """The messages grouped by the queue they came from (lanes with none left out)."""
        groups = [(q, [r for r in messages if r.lane == q.lane]) for q in self._lanes]
        return [(q, mine) for q, mine in groups if mine]

    def _delete(self, messages: list[Received]) -> None:
        for queue, mine in self._by_lane(messages):
            queue.delete(mine)
        self._forget(messages)

    def _release(self, messages: list[Received], seconds: int) -> None:
        for queue, mine in self._by_lane(messages):
            queue.set_visibility(mine, seconds)
        self._forget(messages)

    def _forget(self, messages: list[Received]) -> None:
        with self._in_hand_lock:
            for r in messages:
                self._in_hand.pop(r.receipt_handle, None)

    @staticmethod
    def _backoff(runnable: list[Pending]) -> int:
        tries = max(p.received.receive_count for p in runnable)
        return min(2 ** (tries - 1), 30)

    # -- versions ----------------------------------------------------------------

    def _version(self, version: str) -> ModelVersion | None:
        if version not in self._versions or self._versions[version] is None:
            self._versions[version] = self._registry.get(self.model, version)
        return self._versions[version]

    def _runtime(self, record: ModelVersion) -> ModelRuntime:
        if record.version not in self._runtimes:
            self._runtimes[record.version] = self._load_runtime(record)
        return self._runtimes[record.version]

    def _limits(self, version: str) -> tuple[int, float]:
        record = self._versions.get(version)
        if record is None:
            return 1, 0.0
        return record.max_batch_size, record.max_wait_ms / 1000

    def _emit(
        self,
        version: str,
        *,
        batch_size: int | None = None,
        compute_ms: float | None = None,
        queue_wait_ms: float | None = None,
        item_errors: int = 0,
    ) -> None:
        if not self._emit_enabled:
            return
        values = {}
        if batch_size is not None:
            values["BatchSize"] = (COUNT, float(batch_size))
        if compute_ms is not None:
            values["Compute"] = (MILLISECONDS, compute_ms)
        if queue_wait_ms is not None:
            values["QueueWait"] = (MILLISECONDS, queue_wait_ms)
        if item_errors:
            values["ItemErrors"] = (COUNT, float(item_errors))
        if values:
            self._metrics.submit(emit_metrics, values, model=self.model, version=version)


class _Refused(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class _Generating:
    """A message whose sequences are in a running batch (a streamed one's writer)."""

    def __init__(
        self,
        pending: Pending,
        sequences: list[Sequence],
        started: float,
        streamer: _Streamer | None,
    ) -> None:
        self.pending = pending
        self.sequences = sequences
        self.started = started
        self.streamer = streamer


class _Streamer:
    """Gathers a streamed sequence's tokens into chunks and writes them, in order,
    with at most one write of its own in flight: the first token at once (the
    caller's time to first token), then what has gathered when the last write is
    done and ``stream_flush_seconds`` have passed, and the last chunk with how the
    generation ended. When writes are slower than tokens come (many streams, a busy
    table), chunks grow rather than queue. ``after_last`` runs once the last chunk
    is written (or cannot be): the request's result is stored then."""

    def __init__(self, worker: Worker, message: QueueMessage, sequence: Sequence) -> None:
        self._worker = worker
        self._message = message
        self._start = len(sequence.ids)  # tokens before it are written already
        self._ids: list[int] = []
        self._pieces: list[str] = []
        self._ending: dict[str, Any] | None = None
        self._flushed_at = 0.0
        self._writing = False
        self._last_written = sequence.done  # resumed after its end: nothing to write
        self._then: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self.disowned = False

    def on_token(self, sequence: Sequence, index: int, token: int, piece: str) -> None:
        with self._lock:
            self._ids.append(token)
            self._pieces.append(piece)
            if sequence.done:
                output = sequence.output()
                self._ending = {"finish_reason": output["finish_reason"], "usage": output["usage"]}
            if self._writing or not self._due():
                return
            self._writing = True
        self._worker._stream_writer.submit(self._write)

    def after_last(self, then: Callable[[], None]) -> None:
        with self._lock:
            if not self._last_written:
                self._then = then
                return
        then()

    def _due(self) -> bool:
        first = self._flushed_at == 0.0
        waited = time.monotonic() - self._flushed_at >= self._worker._stream_flush
        return bool(self._ids) and (first or waited or self._ending is not None)

    def _write(self) -> None:
        """On a stream writer thread: write what has gathered, then again while more
        is due; the last chunk runs ``after_last``'s callback."""
        while True:
            with self._lock:
                if not self._ids or self.disowned:
                    self._writing = False
                    last = self.disowned and self._ending is not None
                    break
                chunk = Chunk(start=self._start, ids=self._ids, pieces=self._pieces)
                last = self._ending is not None
                if last:
                    chunk.finish_reason = self._ending["finish_reason"]
                    chunk.usage = self._ending["usage"]
                self._start += len(self._ids)
                self._ids, self._pieces = [], []
                self._flushed_at = time.monotonic()
            self._worker._write_chunk(self._message, chunk, self)
            if last:
                with self._lock:
                    self._writing = False
                break
            with self._lock:
                if not self._due():
                    self._writing = False
                    last = False
                    break
        if last:
            self._finished()

    def _finished(self) -> None:
        with self._lock:
            self._last_written = True
            then, self._then = self._then, None
        if then is not None:
            then()


def _timed_predict(runtime: Any, inputs: list[Any]) -> tuple[list[Any], float]:
    """A runtime's outputs for ``inputs`` and the seconds the call took."""
    began = time.perf_counter()
    outputs = runtime.predict(inputs)
    return outputs, time.perf_counter() - began


def _unread(p: Pending) -> bool:
    """A decoded request whose status in the results table is not read yet."""
    return p.message is not None and p.status is None


def _unrecorded(p: Pending, record: ResultRecord) -> bool:
    """A sync request's result, with no record yet unless it was handed off at its
    deadline (a fallback's copy, sent once the first version is late or failed, may
    well find one: it is stored on its own)."""
    m = p.message
    return m is not None and m.respond_by is not None and not m.fallback and record.job is None


def _stamp(records: list[ResultRecord]) -> None:
    """Completed now, as their write leaves."""
    now = time.time()
    for record in records:
        record.completed_at = record.timings["completed_at"] = now
