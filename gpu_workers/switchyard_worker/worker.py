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

A model's own worker (:class:`Worker`) wires these stages once; a pool's worker
(``pool.PoolWorker``) wires them for each of its models (:class:`ModelStages`) and
runs their micro-batches on one line, loading versions into its model cache
(``model_cache``) as their work asks for them.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from switchyard.admission import QueuedWork
from switchyard.generation import TokenStream
from switchyard.jobs import Job, JobStore
from switchyard.payloads import PayloadStore
from switchyard.queues import WorkQueue
from switchyard.registry import ModelVersion, Registry
from switchyard.result_cache import ResultCache
from switchyard.results import ResultStore
from switchyard.telemetry import PredictionLog
from switchyard_worker.costing import CostKeeper
from switchyard_worker.finisher import Finisher
from switchyard_worker.generation_loop import GenerationLoop
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.intake import Intake
from switchyard_worker.micro_batch_loop import MicroBatchLoop
from switchyard_worker.model_cache import ModelCache
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


@dataclass(frozen=True)
class Wiring:
    """What the stages of every model a worker serves share: the platform's stores
    and the delivery numbers."""

    worker_id: str
    registry: Registry
    results: ResultStore
    payloads: PayloadStore
    visibility_timeout: int
    cache: ResultCache | None = None
    poll_wait_seconds: int = 1
    prediction_log: PredictionLog | None = None
    emit: bool = True
    max_receive_count: int = 5
    result_ttl_seconds: int = 86_400
    jobs: JobStore | None = None
    job_output_s3: Any = None
    job_ended: Callable[[Job], None] | None = None
    # The worker service (a model's own, or a pool's): each answer says it ran there.
    service: str | None = None
    # Each tenant's weight in the batches (WorkerSettings.tenant_weights).
    tenant_weights: Mapping[str, int] = field(default_factory=dict)
    # Where a request's place in its tenant's queued work is given back once its
    # result is stored (switchyard.admission.QueuedWork).
    queued: QueuedWork | None = None
    # Prices each answer and meters the worker's time (None: nothing is costed).
    costs: CostKeeper | None = None


@dataclass
class ModelStages:
    """One model's pipeline stages, wired (the module's docstring says what each
    does): a model's own worker has one, a pool's worker one per model."""

    versions: ServedVersions
    in_hand: MessagesInHand
    intake: Intake
    finisher: Finisher
    triage: Triage
    metrics: MetricsEmitter

    @classmethod
    def wire(
        cls,
        model: str,
        lanes: tuple[WorkQueue, WorkQueue],
        wiring: Wiring,
        *,
        stopping: threading.Event,
        load_runtime: RuntimeLoader,
        model_cache: ModelCache | None = None,
        on_hold: Callable[[], None] | None = None,
        gate: Callable[[], bool] | None = None,
    ) -> ModelStages:
        versions = ServedVersions(model, wiring.registry, load_runtime, model_cache)
        in_hand = MessagesInHand(lanes, wiring.visibility_timeout)
        intake = Intake(
            model=model,
            in_hand=in_hand,
            versions=versions,
            payloads=wiring.payloads,
            results=wiring.results,
            stopping=stopping,
            poll_wait_seconds=wiring.poll_wait_seconds,
            on_hold=on_hold,
            gate=gate,
            weights=wiring.tenant_weights,
        )
        finisher = Finisher(
            worker_id=wiring.worker_id,
            served_by=wiring.service or model,
            results=wiring.results,
            in_hand=in_hand,
            versions=versions,
            cache=wiring.cache,
            prediction_log=wiring.prediction_log,
            result_ttl_seconds=wiring.result_ttl_seconds,
            max_receive_count=wiring.max_receive_count,
            jobs=wiring.jobs,
            job_output_s3=wiring.job_output_s3,
            job_ended=wiring.job_ended,
            queued=wiring.queued,
            costs=wiring.costs,
        )
        triage = Triage(
            worker_id=wiring.worker_id,
            in_hand=in_hand,
            finisher=finisher,
            read_statuses=intake.read_statuses,
            jobs=wiring.jobs,
        )
        metrics = MetricsEmitter(model, wiring.emit)
        return cls(versions, in_hand, intake, finisher, triage, metrics)

    def micro_batch_loop(self, stopping: threading.Event) -> MicroBatchLoop:
        """The loop that runs this model's micro-batches."""
        return MicroBatchLoop(
            stopping=stopping,
            versions=self.versions,
            in_hand=self.in_hand,
            intake=self.intake,
            triage=self.triage,
            finisher=self.finisher,
            metrics=self.metrics,
        )


class WorkerProcess:
    """What every worker does with its stages and its loop, whatever it serves:
    start, serve until stopped (a signal, or ``stop``), drain and close."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._stopping = threading.Event()
        self.stages: list[ModelStages] = []
        self.costs: CostKeeper | None = None  # the worker's time, metered while it runs

    @property
    def loop(self) -> WorkLoop:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Who this worker is, for its log lines."""
        return {"worker": self.worker_id}

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
        if self.costs is not None:
            self.costs.start()
        loop.start_taking_in()
        if ready:
            ready()
        log.info("polling", extra=self.describe())
        try:
            while not self._stopping.is_set():
                loop.step()
            loop.drain()
        finally:
            self._close(loop)

    def wait_for_results(self) -> None:
        """Return once every finished batch's results are stored and its messages
        deleted."""
        for stages in self.stages:
            stages.finisher.flush()

    def step(self) -> None:
        """One turn of the loop on this thread alone (the unit tests' handle)."""
        self.loop.step_alone()

    def preload(self) -> None:
        """Get ready to serve before the first poll."""

    def _start_heartbeat(self) -> None:
        """Keep the messages in hand invisible to other workers until stopped."""
        heartbeat = threading.Thread(
            target=keep_invisible,
            args=([s.in_hand for s in self.stages], self._stopping),
            name="visibility",
            daemon=True,
        )
        heartbeat.start()

    def _close(self, loop: WorkLoop) -> None:
        """Release what was not started, then store what was finished."""
        released = loop.close()
        for stages in self.stages:
            stages.finisher.close()
            stages.metrics.close()
        if self.costs is not None:
            self.costs.stop()
        log.info(
            "stopped",
            extra={"worker": self.worker_id, "released": released, "batches": loop.batches_run},
        )


class Worker(WorkerProcess):
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
        tenant_weights: Mapping[str, int] | None = None,
        queued: QueuedWork | None = None,
        costs: CostKeeper | None = None,
    ) -> None:
        super().__init__(worker_id)
        self.model = model
        self.costs = costs
        wiring = Wiring(
            worker_id=worker_id,
            registry=registry,
            results=results,
            payloads=payloads,
            visibility_timeout=visibility_timeout,
            cache=cache,
            poll_wait_seconds=poll_wait_seconds,
            prediction_log=prediction_log,
            emit=emit,
            max_receive_count=max_receive_count,
            result_ttl_seconds=result_ttl_seconds,
            jobs=jobs,
            job_output_s3=job_output_s3,
            job_ended=job_ended,
            tenant_weights=tenant_weights or {},
            queued=queued,
            costs=costs,
        )
        stages = ModelStages.wire(
            model, (realtime, batch), wiring, stopping=self._stopping, load_runtime=load_runtime
        )
        self.stages = [stages]
        self._versions = stages.versions
        self.in_hand = stages.in_hand
        self.intake = stages.intake
        self.finisher = stages.finisher
        self.triage = stages.triage
        self._metrics = stages.metrics
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

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "worker": self.worker_id}

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
        return self.stages[0].micro_batch_loop(self._stopping)


def keep_invisible(in_hands: list[MessagesInHand], stopping: threading.Event) -> None:
    """Extend every held message of every model before its visibility runs out, until
    stopped (the heartbeat's thread)."""
    interval = max(min((h.visibility for h in in_hands), default=3) / 3, 1)
    while not stopping.wait(interval):
        for in_hand in in_hands:
            in_hand.beat()
