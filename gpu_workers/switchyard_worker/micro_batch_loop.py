"""A predicting model's worker loop: micro-batches, each run whole on the model's thread.

The intake's threads form the next batch (up to ``max_batch_size`` inputs or
``max_wait_ms``) while the model runs the one before; this loop takes each once it is
due, through triage and the model, and hands its results to the finisher. A job's
chunk runs in parts, sorted by size, with the realtime work that arrives meanwhile
run beside them (where the runtime takes two calls at once) or between them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from switchyard.registry import ModelVersion
from switchyard.schemas import ErrorInfo, ResultRecord, TensorSignature
from switchyard.signatures import check_inputs
from switchyard_worker.batching import Pending
from switchyard_worker.finisher import Answered, BatchRun, Finisher
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.intake import Intake, invalid_input
from switchyard_worker.runtimes import OutputCountMismatch, size_order
from switchyard_worker.stages import MetricsEmitter, log
from switchyard_worker.tensors import plainly_valid, rows_of, stacked
from switchyard_worker.triage import Triage
from switchyard_worker.versions import ServedVersions


class BatchFailed(Exception):
    """The model failed a whole batch; every message in it goes back for retry."""


class MicroBatchLoop:
    """Micro-batches per version, formed by the intake's threads, each run on the
    worker's main thread once it is due."""

    def __init__(
        self,
        *,
        stopping: threading.Event,
        versions: ServedVersions,
        in_hand: MessagesInHand,
        intake: Intake,
        triage: Triage,
        finisher: Finisher,
        metrics: MetricsEmitter,
    ) -> None:
        self._stopping = stopping
        self._versions = versions
        self._in_hand = in_hand
        self._intake = intake
        self._triage = triage
        self._finisher = finisher
        self._metrics = metrics
        self._receivers: list[threading.Thread] = []
        # A job's part runs here when its runtime takes calls from two threads at once
        # (``concurrent_calls``), so that realtime work arriving meanwhile runs beside
        # it on the main thread instead of waiting for it.
        self._job_parts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-part")
        self.batches_run = 0

    # -- what the worker drives ----------------------------------------------------

    def start_taking_in(self) -> None:
        """Start the intake's thread and the realtime watcher's."""
        for target, name in (
            (self._intake.run, "intake"),
            (self._intake.watch_realtime, "intake-rt"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._receivers.append(thread)

    def step(self) -> None:
        """Run the next batch once the intake has it due."""
        batch = self._intake.take_due()
        if batch:
            self.execute(batch)

    def step_alone(self) -> None:
        """One turn on this thread alone: receive what the pending batch still wants,
        or look at the realtime lane as the realtime watcher would; run the batch
        when due."""
        if self._intake.wants_more():
            self._intake.receive()
        elif self._intake.watches_realtime():
            self._intake.look_at_realtime(0)  # the realtime watcher's look, without its wait
        batch = self._intake.take(force=self._stopping.is_set())
        if batch:
            self.execute(batch)

    def drain(self) -> None:
        """Stopping: each step ran its batch to the end; wait for the intake's threads,
        after which nothing more is added."""
        for thread in self._receivers:
            thread.join(self._intake.poll_wait + 30)

    def close(self) -> int:
        """Release what was received and not started; the messages released."""
        leftover = self._intake.drain()
        self._in_hand.release([p.received for p in leftover], 0)
        self._job_parts.shutdown(wait=True)
        return len(leftover)

    # -- one batch -----------------------------------------------------------------

    def execute(self, batch: list[Pending]) -> None:
        """One batch through triage and the model, its results handed to the finisher."""
        answered, runnable = self._triage(batch)
        if runnable:
            answered.extend(self._answers(runnable))
        if answered:
            self._finisher.submit(answered)
        self.batches_run += 1

    def settle(
        self, batch: list[Pending], *, error: ErrorInfo | None = None, failure: str | None = None
    ) -> None:
        """A batch whose version cannot run here (a pool's worker: refused, or its
        load failed): triage answers what needs no model; the rest gets ``error`` as
        its final result or, without one, goes back for retry as a failed batch does,
        ``failure`` saying why."""
        answered, runnable = self._triage(batch)
        if runnable and error is not None:
            records = self._finisher.records(runnable, "error", error=error)
            answered.extend(zip(runnable, records, strict=True))
        elif runnable:
            self._finisher.failed(runnable, failure or "not run")
        if answered:
            self._finisher.submit(answered)

    def _answers(self, runnable: list[Pending]) -> Answered:
        """The messages' results; none if the batch failed (they go back for retry).
        Rows that came as blocks of numbers are checked here, the batch's together:
        those off the version's signature are answered invalid_input, and the rest
        run."""
        record = self._versions.get(runnable[0].version)
        assert record is not None
        flat = stacked([p.inputs for p in runnable], [p.size for p in runnable])
        refused: Answered = []
        signature = record.signature
        checked = isinstance(flat, np.ndarray) and isinstance(signature, TensorSignature)
        if checked and not plainly_valid(flat, signature):
            refused = self._off_signature(runnable, record)
            runnable = [p for p in runnable if p.error is None]
            if not runnable:
                return refused
            flat = stacked([p.inputs for p in runnable], [p.size for p in runnable])
        try:
            outputs, ran = self._run(runnable, record, flat)
        except BatchFailed as failed:
            self._finisher.failed(runnable, str(failed))
            return refused
        records = self._finisher.records(runnable, "done", outputs=outputs, ran=ran)
        self._emit(runnable[0].version, records, ran)
        return refused + list(zip(runnable, records, strict=True))

    def _off_signature(self, runnable: list[Pending], record: ModelVersion) -> Answered:
        """The requests whose blocks of numbers are off the version's signature, each
        answered invalid_input naming what is wrong, as for JSON rows."""
        refused: Answered = []
        for p in runnable:
            if type(p.inputs) is not bytes:
                continue  # JSON rows, checked as they were read
            problems = check_inputs(
                rows_of(p.inputs, p.size).tolist(), record.signature, record.max_inputs_per_request
            )
            if problems:
                p.error = invalid_input(problems)
                refused.append((p, self._finisher.record(p, "error", error=p.error)))
        return refused

    def _run(
        self, runnable: list[Pending], record: ModelVersion, flat: Any
    ) -> tuple[list[list[Any]], BatchRun]:
        """Outputs per message, and the batch's run (``flat``: its inputs stacked);
        raises BatchFailed if the batch failed as a whole."""
        version = record.version
        self._intake.model_started(version, len(flat))
        started = time.time()
        try:
            outputs, computing = self._outputs(record, flat, runnable[0].received.lane == "batch")
        except Exception as exc:  # noqa: BLE001 - the whole batch goes back for retry
            self._finisher.worked(time.time() - started)  # busy, billed to no request
            raise self._batch_failed(version, runnable, len(flat), exc) from None
        self._intake.model_ended(version, len(flat), computing)
        self._finisher.worked(computing)
        return _per_message(runnable, outputs), BatchRun(started, computing * 1000, len(flat))

    def _outputs(
        self, record: ModelVersion, flat: list[Any], batch_lane: bool
    ) -> tuple[list[Any], float]:
        """The model's outputs for ``flat``, in its order, and the seconds spent in the
        model (realtime work run in between left out)."""
        with self._versions.using(record) as runtime:
            # A job's chunk runs in several parts: sorted by size first, each part pads
            # to a nearer length (a chunk of 64 sentences in two parts of 32: 232
            # sentences a second in-process, against 214 in the order they came).
            order = size_order(runtime, flat) if batch_lane else None
            work = [flat[j] for j in order] if order else flat
            outputs, computing = self._in_parts(runtime, record.max_batch_size, work, batch_lane)
        return (_in_given_order(order, outputs) if order else outputs), computing

    def _in_parts(
        self, runtime: Any, max_batch_size: int, work: list[Any], batch_lane: bool
    ) -> tuple[list[Any], float]:
        """``work`` run in parts of at most ``max_batch_size``. A job's chunk (the batch
        lane) lets realtime work that arrived meanwhile run between two parts, not
        after the chunk, or beside them where the runtime allows it; unless it runs
        beside them, the parts are smaller while realtime work comes in."""
        beside = batch_lane and getattr(runtime, "concurrent_calls", False)
        outputs: list[Any] = []
        computing = 0.0
        i = 0
        while i < len(work):
            if batch_lane and i:
                self._realtime_first()
            size = (
                self._intake.part_size(max_batch_size)
                if batch_lane and not beside
                else max_batch_size
            )
            chunk = work[i : i + size]
            i += size
            run = self._part_beside_realtime if beside else _timed_predict
            result, seconds = run(runtime, chunk)
            computing += seconds
            if len(result) != len(chunk):
                raise OutputCountMismatch(f"{len(chunk)} inputs gave {len(result)} outputs")
            outputs.extend(result)
        return outputs, computing

    def _batch_failed(
        self, version: str, runnable: list[Pending], size: int, exc: Exception
    ) -> BatchFailed:
        """The model failed the batch: said in the log and the metrics."""
        self._intake.model_ended(version, size, None)
        log.warning(
            "batch failed; messages released for retry",
            extra={"version": version, "messages": len(runnable), "error": repr(exc)},
        )
        self._metrics.emit(version, item_errors=len(runnable))
        return BatchFailed(f"{type(exc).__name__}: {exc}"[:300])

    def _emit(self, version: str, records: list[ResultRecord], ran: BatchRun) -> None:
        """The batch's metrics: its size, its compute and its longest queue wait (as
        its records' timings give it)."""
        waits = [r.timings["queue_wait_ms"] for r in records if "queue_wait_ms" in r.timings]
        self._metrics.emit(
            version,
            batch_size=ran.size,
            compute_ms=ran.compute_ms,
            queue_wait_ms=max(waits) if waits else None,
        )

    # -- realtime work beside or between a job's parts -------------------------------

    def _part_beside_realtime(self, runtime: Any, chunk: list[Any]) -> tuple[list[Any], float]:
        """A job's part, run on the part thread; realtime work that arrives while it
        runs is run on this thread at the same time, not after it (minilm-embed on 2
        cores: a realtime sentence beside a part of 32 answered in 28-31 ms at the
        median, the part's rate 0.97-1.01x of its rate alone)."""
        part = self._job_parts.submit(_timed_predict, runtime, chunk)
        part.add_done_callback(lambda _: self._intake.wake())
        while True:
            self._intake.wait_for_realtime(part)
            if part.done():
                return part.result()
            self._realtime_first()

    def _realtime_first(self) -> None:
        """Run the realtime work held now, ahead of the rest of a batch-lane batch."""
        batch = self._intake.take_realtime()
        if batch:
            self.execute(batch)


def _timed_predict(runtime: Any, inputs: list[Any]) -> tuple[list[Any], float]:
    """A runtime's outputs for ``inputs`` and the seconds the call took."""
    began = time.perf_counter()
    outputs = runtime.predict(inputs)
    return outputs, time.perf_counter() - began


def _in_given_order(order: list[int], outputs: list[Any]) -> list[Any]:
    """Outputs computed in ``order`` (indices of the inputs), put back in the inputs'."""
    in_order: list[Any] = [None] * len(outputs)
    for j, output in zip(order, outputs, strict=True):
        in_order[j] = output
    return in_order


def _per_message(runnable: list[Pending], outputs: list[Any]) -> list[list[Any]]:
    """The batch's outputs cut per message, in order."""
    if len(runnable) == len(outputs):  # an input each (a message holds one at least)
        return [[output] for output in outputs]
    per_message = []
    offset = 0
    for p in runnable:
        size = p.size
        per_message.append(outputs[offset : offset + size])
        offset += size
    return per_message
