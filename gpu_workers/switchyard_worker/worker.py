"""The worker: long-poll, micro-batch, run, store results, then delete.

Its pipeline, one stage a module, each on its own thread where it overlaps the model:
1. the intake (``intake``) receives, decodes and validates the next batch while the
   model runs the one before, and hands the model's thread each batch once it is due;
2. triage (``triage``) answers without running what needs no model (expired,
   cancelled, invalid, answered already) and deletes what was answered before;
3. the model runs on the worker's main thread, in the loop its runtime calls for:
   micro-batches (``micro_batch_loop``: a job's chunk in parts, with realtime work
   beside or between them), or continuous batches for a generative model
   (``generation_loop``), chosen once the model's versions are read (``preload``);
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
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from switchyard.generation import TokenStream
from switchyard.jobs import Job, JobStore
from switchyard.payloads import PayloadStore
from switchyard.queues import WorkQueue
from switchyard.registry import ModelVersion, Registry
from switchyard.result_cache import ResultCache
from switchyard.results import ResultStore
from switchyard.telemetry import PredictionLog
from switchyard_worker.finisher import Finisher
from switchyard_worker.generation_loop import GenerationLoop
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.intake import Intake
from switchyard_worker.micro_batch_loop import MicroBatchLoop
from switchyard_worker.runtimes import GENERATIVE_RUNTIMES
from switchyard_worker.stages import MetricsEmitter, log
from switchyard_worker.triage import Triage
from switchyard_worker.versions import RuntimeLoader, ServedVersions


@runtime_checkable
class WorkLoop(Protocol):
    """What runs the model on the worker's main thread, fed by threads of its own
    (``MicroBatchLoop`` or ``GenerationLoop``). The worker drives either the same way:
    start taking in, step until stopped, drain, close."""

    batches_run: int

    def start_taking_in(self) -> None:
        """Start the threads that receive work for the model."""

    def step(self) -> None:
        """One turn of the model, fed by those threads; it waits a little when idle."""

    def step_alone(self) -> None:
        """One turn without those threads started (the unit tests' handle)."""

    def drain(self) -> None:
        """Stopping: finish the work running and wait for the receiving threads."""

    def close(self) -> int:
        """Release the work in hand not started and end the loop's own threads; the
        messages released."""


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
        # What a generative model's loop is built with (``_loop_for``).
        self._stream = stream
        self._stream_flush_seconds = stream_flush_seconds
        self._result_ttl_seconds = result_ttl_seconds
        self._generation_visibility = generation_visibility_seconds
        self._loop: WorkLoop | None = None

    # -- lifecycle ---------------------------------------------------------------

    def preload(self) -> None:
        """Choose the model's loop by its versions' runtime, then load every active
        version now, so the first request does not pay for it."""
        records = self._versions.all()
        self._loop = self._loop_for(records)
        for record in records:
            if record.status == "active":
                try:
                    self._versions.runtime(record)
                except Exception:  # noqa: BLE001 - a bad version must not stop the others
                    log.exception("preload failed", extra={"version": record.version})

    @property
    def loop(self) -> WorkLoop:
        """The model's loop: chosen at ``preload``, or else from the versions read so
        far when it is first needed (none: the micro-batch loop)."""
        if self._loop is None:
            self._loop = self._loop_for(self._versions.known())
        return self._loop

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
        """Serve until stopped. The loop's threads receive, decode and validate the
        next work while this thread runs the model on the current one; once stopped,
        the running work finishes and what was not started is released."""
        loop = self.loop
        self._start_heartbeat()
        loop.start_taking_in()
        if ready:
            ready()
        log.info("polling", extra={"model": self.model, "worker": self.worker_id})
        try:
            while not self._stopping.is_set():
                loop.step()
            loop.drain()
        finally:
            self._close(loop)

    def wait_for_results(self) -> None:
        """Return once every finished batch's results are stored and its messages
        deleted."""
        self.finisher.flush()

    def step(self) -> None:
        """One turn of the model's loop on this thread alone (the unit tests' handle)."""
        self.loop.step_alone()

    def _loop_for(self, records: list[ModelVersion]) -> WorkLoop:
        """Continuous batching for a generative model, micro-batches for any other."""
        if any(record.runtime in GENERATIVE_RUNTIMES for record in records):
            return GenerationLoop(
                worker_id=self.worker_id,
                stopping=self._stopping,
                versions=self._versions,
                in_hand=self.in_hand,
                intake=self.intake,
                triage=self.triage,
                finisher=self.finisher,
                metrics=self._metrics,
                stream=self._stream,
                stream_flush_seconds=self._stream_flush_seconds,
                result_ttl_seconds=self._result_ttl_seconds,
                visibility_seconds=self._generation_visibility,
            )
        return MicroBatchLoop(
            stopping=self._stopping,
            versions=self._versions,
            in_hand=self.in_hand,
            intake=self.intake,
            triage=self.triage,
            finisher=self.finisher,
            metrics=self._metrics,
        )

    def _start_heartbeat(self) -> None:
        """Keep the messages in hand invisible to other workers until stopped."""
        heartbeat = threading.Thread(
            target=self.in_hand.heartbeat, args=(self._stopping,), name="visibility", daemon=True
        )
        heartbeat.start()

    def _close(self, loop: WorkLoop) -> None:
        """Release what was not started, then store what was finished."""
        released = loop.close()
        self.finisher.close()
        self._metrics.close()
        log.info(
            "stopped",
            extra={"worker": self.worker_id, "released": released, "batches": loop.batches_run},
        )
