"""The worker: long-poll, micro-batch, run, store results, then delete.

Its pipeline, one stage a module, each on its own thread where it overlaps the model:
1. the intake (``intake``) receives, decodes and validates the next batch while the
   model runs the one before, and hands the model's thread each batch once it is due;
2. triage (``triage``) answers without running what needs no model (expired,
   cancelled, invalid, answered already) and deletes what was answered before;
3. the model runs on this module's main thread (a job's chunk in parts, with realtime
   work beside or between them);
4. the finisher (``finisher``) stores the results, logs the predictions, fills the
   cache and then deletes the messages, in batch order, while the model runs on;
5. the messages in hand (``in_hand``) are kept invisible by a heartbeat until they
   are deleted or released; metrics are printed on a thread of their own (``stages``).

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

A generative model's worker batches continuously instead (``generation_loop``), with
the same intake's decoding, triage and finisher.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from switchyard.generation import TokenStream
from switchyard.jobs import Job, JobStore
from switchyard.payloads import PayloadStore
from switchyard.queues import WorkQueue
from switchyard.registry import Registry
from switchyard.result_cache import ResultCache
from switchyard.results import ResultStore
from switchyard.telemetry import PredictionLog
from switchyard_worker.batching import Pending
from switchyard_worker.finisher import Finisher
from switchyard_worker.generation_loop import GenerationLoop
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.intake import Intake
from switchyard_worker.runtimes import GENERATIVE_RUNTIMES, OutputCountMismatch, size_order
from switchyard_worker.stages import MetricsEmitter, log
from switchyard_worker.triage import Triage
from switchyard_worker.versions import RuntimeLoader, ServedVersions


class BatchFailed(Exception):
    """The model failed a whole batch; every message in it goes back for retry."""


class Worker:
    """One model's worker: its pipeline's stages, wired, and the model's own thread."""

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
        self._stopping = threading.Event()
        self._versions = ServedVersions(model, registry, load_runtime)
        self.in_hand = MessagesInHand((realtime, batch), visibility_timeout)
        self._generation_visibility = generation_visibility_seconds
        self.intake = Intake(
            model=model,
            in_hand=self.in_hand,
            versions=self._versions,
            payloads=payloads,
            results=results,
            stopping=self._stopping,
            poll_wait_seconds=poll_wait_seconds,
        )
        self.finisher = Finisher(
            worker_id=worker_id,
            results=results,
            in_hand=self.in_hand,
            versions=self._versions,
            cache=cache,
            prediction_log=prediction_log,
            result_ttl_seconds=result_ttl_seconds,
            max_receive_count=max_receive_count,
            jobs=jobs,
            job_output_s3=job_output_s3,
            job_ended=job_ended,
        )
        self.triage = Triage(
            worker_id=worker_id,
            in_hand=self.in_hand,
            finisher=self.finisher,
            read_statuses=self.intake.read_statuses,
            jobs=jobs,
        )
        self._metrics = MetricsEmitter(model, emit)
        # Generative models (continuous batching) run this loop instead.
        self.generative = False
        self.generation = GenerationLoop(
            worker_id=worker_id,
            stopping=self._stopping,
            versions=self._versions,
            in_hand=self.in_hand,
            intake=self.intake,
            triage=self.triage,
            finisher=self.finisher,
            metrics=self._metrics,
            stream=stream,
            stream_flush_seconds=stream_flush_seconds,
            result_ttl_seconds=result_ttl_seconds,
        )
        # A job's part runs here when its runtime takes calls from two threads at once
        # (``concurrent_calls``), so that realtime work arriving meanwhile runs beside
        # it on the main thread instead of waiting for it.
        self._job_parts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-part")
        self.batches_run = 0

    # -- lifecycle ---------------------------------------------------------------

    def preload(self) -> None:
        """Load every active version now, so the first request does not pay for it."""
        for record in self._versions.all():
            if record.runtime in GENERATIVE_RUNTIMES:
                self.generative = True
                self.in_hand.visibility = self._generation_visibility
            if record.status == "active":
                try:
                    self._versions.runtime(record)
                except Exception:  # noqa: BLE001 - a bad version must not stop the others
                    log.exception("preload failed", extra={"version": record.version})

    def stop(self, *_: Any) -> None:
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, *_: Any) -> None:
        """SIGTERM or SIGINT: stop, from a thread of its own. A handler runs on the main
        thread between two bytecodes, perhaps while that thread holds the stop Event's
        lock: inside its own ``set`` when a second signal follows the first (Ctrl-C
        reaches the worker and the supervisor's SIGTERM comes after), where setting the
        Event here would wait for that lock forever."""
        threading.Thread(target=self.stop, name="stop", daemon=True).start()

    def run(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until stopped. The intake receives, decodes and validates the next
        batch while this thread runs the model on the current one (a generative
        model's receiver feeds its running batch instead)."""
        heartbeat = threading.Thread(
            target=self.in_hand.heartbeat, args=(self._stopping,), name="visibility", daemon=True
        )
        heartbeat.start()
        taker = self.generation.take_in if self.generative else self.intake.run
        intake = threading.Thread(target=taker, name="intake", daemon=True)
        intake.start()
        watcher = None
        if not self.generative:
            watcher = threading.Thread(
                target=self.intake.watch_realtime, name="intake-rt", daemon=True
            )
            watcher.start()
        if ready:
            ready()
        log.info("polling", extra={"model": self.model, "worker": self.worker_id})
        try:
            while not self._stopping.is_set():
                if self.generative:
                    self.generation.step()
                else:
                    self._run_next_batch()
            while self.generative and self.generation.generating():
                self.generation.step()  # SIGTERM: the running batch finishes
            intake.join(self.intake.poll_wait + 30)  # nothing more is added once it is back
            if watcher is not None:
                watcher.join(self.intake.poll_wait + 30)
        finally:
            self.generation.release_arrivals()
            self.generation.close()
            leftover = self.intake.drain()
            self.in_hand.release([p.received for p in leftover], 0)
            self.finisher.close()
            self._metrics.close()
            self._job_parts.shutdown(wait=True)
            log.info(
                "stopped",
                extra={
                    "worker": self.worker_id,
                    "released": len(leftover),
                    "batches": self.batches_run,
                },
            )

    def wait_for_results(self) -> None:
        """Return once every finished batch's results are stored and its messages
        deleted."""
        self.finisher.flush()

    def _run_next_batch(self) -> None:
        """Run the next batch once the intake has it due."""
        batch = self.intake.take_due()
        if batch:
            self.execute(batch)

    def step(self) -> None:
        """One turn on this thread alone (the unit tests' handle on the loop): receive
        what the pending batch still wants, or look at the realtime lane as the
        realtime watcher would; run the batch when due."""
        if self.generative:
            self.generation.step()
            return
        if self.intake.wants_more():
            self.intake.receive()
        elif self.intake.watches_realtime():
            self.intake.look_at_realtime(0)  # the realtime watcher's look, without its wait
        batch = self.intake.take(force=self._stopping.is_set())
        if batch:
            self.execute(batch)

    # -- the model's stage ---------------------------------------------------------

    def execute(self, batch: list[Pending]) -> None:
        """One batch through triage and the model, its results handed to the finisher."""
        answered, runnable = self.triage(batch)
        if runnable:
            try:
                outputs = self._run(runnable)
            except BatchFailed as failed:
                self.finisher.failed(runnable, str(failed))
            else:
                record = self.finisher.record
                answered.extend(
                    (p, record(p, "done", outputs=out, timing=timing))
                    for p, (out, timing) in zip(runnable, outputs, strict=True)
                )
        if answered:
            self.finisher.submit(answered)
        self.batches_run += 1

    def _run(self, runnable: list[Pending]) -> list[tuple[list[Any], dict[str, float]]]:
        """Outputs per message; raises BatchFailed if the batch failed as a whole."""
        version = runnable[0].version
        record = self._versions.get(version)
        assert record is not None
        flat = [x for p in runnable for x in (p.inputs or [])]
        batch_lane = runnable[0].received.lane == "batch"
        self.intake.model_started(version, len(flat))
        started = time.time()
        computing = 0.0  # seconds in the model (realtime work run in between left out)
        try:
            runtime = self._versions.runtime(record)
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
                        size = self.intake.part_size(size)
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
            self.intake.model_ended(version, len(flat), None)
            log.warning(
                "batch failed; messages released for retry",
                extra={"version": version, "messages": len(runnable), "error": repr(exc)},
            )
            self._metrics.emit(version, item_errors=len(runnable))
            raise BatchFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
        compute_ms = computing * 1000
        self.intake.model_ended(version, len(flat), computing)
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
        self._metrics.emit(
            version,
            batch_size=len(flat),
            compute_ms=compute_ms,
            queue_wait_ms=max(queue_wait) if queue_wait else None,
        )
        return per_message

    def _part_beside_realtime(self, runtime: Any, chunk: list[Any]) -> tuple[list[Any], float]:
        """A job's part, run on the part thread; realtime work that arrives while it
        runs is run on this thread at the same time, not after it (minilm-embed on 2
        cores: a realtime sentence beside a part of 32 answered in 28-31 ms at the
        median, the part's rate 0.97-1.01x of its rate alone)."""
        part = self._job_parts.submit(_timed_predict, runtime, chunk)
        part.add_done_callback(lambda _: self.intake.wake())
        while True:
            self.intake.wait_for_realtime(part)
            if part.done():
                return part.result()
            self._realtime_first()

    def _realtime_first(self) -> None:
        """Run the realtime work held now, ahead of the rest of a batch-lane batch."""
        batch = self.intake.take_realtime()
        if batch:
            self.execute(batch)


def _timed_predict(runtime: Any, inputs: list[Any]) -> tuple[list[Any], float]:
    """A runtime's outputs for ``inputs`` and the seconds the call took."""
    began = time.perf_counter()
    outputs = runtime.predict(inputs)
    return outputs, time.perf_counter() - began
