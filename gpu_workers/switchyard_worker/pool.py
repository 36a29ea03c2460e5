"""A pool's worker: many models on one worker, within a memory budget.

Each of the pool's models has the stages a model's own worker has (``worker``'s
:class:`ModelStages`: its intake long-polls the model's two queues and forms its
micro-batches, its finisher stores its results), and the model's micro-batch loop
runs each of its batches (``micro_batch_loop``). What the pool adds is the line
between them and the model cache (``model_cache``):

1. The next batch is the one, among every model's batches that are due, whose work
   has waited longest: realtime before batch lane, then by when its oldest message
   was sent (``batching.rank``).
2. A batch whose version is loaded runs at once, its version pinned while it runs.
   One whose version is not waits, parked beside its model's intake (which forms
   that model's next batch meanwhile, and no more) while the version loads on the
   cache's loader thread; the other models' batches run meanwhile. It is back in
   line once the load has settled.
3. A version the budget cannot hold is refused: its requests get the final error
   ``over_memory_budget``, not retries. A load that fails sends its batch back for
   retry, as a failed batch does. A pool runs micro-batch models only: a generative
   version's requests get the final error ``not_in_pools``.

Every load, eviction and refusal is a log line, an EMF document (namespace
``Switchyard``, dimensions ``pool`` and ``pool, model``: ``ModelLoads``,
``ModelLoadTime``, ``ModelFootprint``, ``ModelEvictions``, ``ModelLoadRefusals``;
``PoolResidentMemory`` and ``PoolResidentVersions`` under ``pool``, on each change
and every minute), and, where the worker was given a state file
(``pool_state_file``: the local platform's status reads it), the cache's state.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from switchyard.queues import ModelLanes
from switchyard.schemas import ErrorInfo
from switchyard.telemetry import COUNT, MILLISECONDS, emit_metrics
from switchyard_worker.batching import Pending, rank
from switchyard_worker.micro_batch_loop import MicroBatchLoop
from switchyard_worker.model_cache import CacheEvent, Key, Meter, ModelCache
from switchyard_worker.overflow import Heartbeat, OverflowGates
from switchyard_worker.runtimes import GENERATIVE_RUNTIMES
from switchyard_worker.stages import log
from switchyard_worker.versions import RuntimeLoader
from switchyard_worker.worker import ModelStages, Wiring, WorkerProcess

OVER_BUDGET = "over_memory_budget"
NOT_IN_POOLS = "not_in_pools"
MEGABYTES = MetricUnit.Megabytes
_IDLE_WAIT_S = 0.05  # the longest the loop sleeps before it looks at every intake again
GAUGE_SECONDS = 60.0  # the pool's resident memory is printed at least this often
STATE_SECONDS = 5.0  # the state file is rewritten at least this often


@dataclass
class Parked:
    """A batch waiting for its version to load."""

    key: Key
    batch: list[Pending]


class PoolLoop:
    """Every model's micro-batches on the worker's main thread, the longest waiting
    first, each once its version is loaded (the module's docstring has the rules)."""

    def __init__(
        self,
        *,
        stopping: threading.Event,
        stages: Mapping[str, ModelStages],
        cache: ModelCache,
        wake: threading.Event,
        report: PoolReport,
    ) -> None:
        self._stopping = stopping
        self._stages = dict(stages)
        self._loops: dict[str, MicroBatchLoop] = {
            model: s.micro_batch_loop(stopping) for model, s in self._stages.items()
        }
        self._cache = cache
        self._wake = wake
        self._report = report
        self._parked: dict[str, Parked] = {}

    @property
    def batches_run(self) -> int:
        return sum(loop.batches_run for loop in self._loops.values())

    # -- what the worker drives ----------------------------------------------------

    def start_taking_in(self) -> None:
        for loop in self._loops.values():
            loop.start_taking_in()

    def step(self) -> None:
        """Run the next batch in line; if none can run, wait until work arrives, a
        load settles or a forming batch is due."""
        self._wake.clear()
        self._report.tick()
        if not self._turn(force=False):
            self._wake.wait(self._idle_wait())

    def step_alone(self) -> None:
        """One turn with no intake threads (the unit tests' handle): each model's
        intake receives what its forming batch wants, then the next batch runs."""
        for stages in self._stages.values():
            if stages.intake.wants_more():
                stages.intake.receive()
        self._turn(force=self._stopping.is_set())

    def drain(self) -> None:
        for loop in self._loops.values():
            loop.drain()

    def close(self) -> int:
        """Release what was received and not started, parked batches too."""
        released = 0
        for model, parked in self._parked.items():
            self._stages[model].in_hand.release([p.received for p in parked.batch], 0)
            released += len(parked.batch)
        self._parked.clear()
        released += sum(loop.close() for loop in self._loops.values())
        self._cache.close()
        self._report.tick(force=True)
        return released

    # -- the line --------------------------------------------------------------------

    def _turn(self, force: bool) -> bool:
        """Deal with the batch first in line, if any can be dealt with now."""
        line: list[tuple[tuple[int, float], str]] = []
        for model, stages in self._stages.items():
            parked = self._parked.get(model)
            if parked is not None:
                if self._cache.settled(parked.key):
                    line.append((rank(parked.batch) or (1, 0.0), model))
                continue
            due = stages.intake.due()
            if due is None and force:
                due = rank(stages.intake.assembler.held)
            if due is not None:
                line.append((due, model))
        if not line:
            return False
        _, model = min(line)
        parked = self._parked.pop(model, None)
        batch = parked.batch if parked else self._stages[model].intake.take(force=force)
        if batch:
            self._run(model, batch, was_parked=parked is not None)
        return True

    def _run(self, model: str, batch: list[Pending], *, was_parked: bool) -> None:
        stages, loop = self._stages[model], self._loops[model]
        version = batch[0].version
        record = stages.versions.get(version) if version else None
        if record is None:  # unreadable, or a version nobody has: triage answers
            loop.execute(batch)
            return
        key = (model, version)
        if record.runtime in GENERATIVE_RUNTIMES:
            why = f"{model} generates: a pool runs micro-batch models (embedders, classifiers)"
            loop.settle(batch, error=ErrorInfo(code=NOT_IN_POOLS, message=why))
            return
        refusal = self._cache.refusal(key)
        if refusal is not None:
            loop.settle(batch, error=ErrorInfo(code=OVER_BUDGET, message=refusal))
            return
        if not self._cache.pin(key):
            failure = self._cache.failure(key)
            if was_parked and failure is not None:
                loop.settle(batch, failure=f"the version did not load: {failure}")
                return
            self._parked[model] = Parked(key, batch)
            self._cache.request(record)
            return
        try:
            loop.execute(batch)
        finally:
            self._cache.unpin(key)

    def _idle_wait(self) -> float:
        lefts = [
            left
            for model, s in self._stages.items()
            if model not in self._parked and (left := s.intake.time_left()) > 0
        ]
        return min([_IDLE_WAIT_S, *lefts]) if lefts else _IDLE_WAIT_S


class PoolReport:
    """The cache's events as log lines and metrics, and its state where the local
    platform's status reads it (the module's docstring)."""

    def __init__(
        self,
        pool: str,
        worker_id: str,
        state_file: Path | None = None,
        emit: bool = True,
    ) -> None:
        self._pool = pool
        self._worker_id = worker_id
        self._state_file = state_file
        self._emit = emit
        self._cache: ModelCache | None = None
        self._lock = threading.Lock()
        self._gauged = self._stated = -float("inf")

    def watch(self, cache: ModelCache) -> None:
        self._cache = cache

    def event(self, event: CacheEvent) -> None:
        """One load, eviction, refusal or failure: said, counted and written down."""
        assert self._cache is not None
        held = self._cache.held()
        footprint = event.footprint
        fields: dict[str, Any] = {
            "pool": self._pool,
            "model": event.model,
            "version": event.version,
            "worker": self._worker_id,
            "held_mib": round(held.host_mib, 1),
            "budget_mib": self._cache.budget.host_mib,
        }
        if footprint is not None:
            fields["footprint_mib"] = round(footprint.host_mib, 1)
            fields["device_footprint_mib"] = round(footprint.device_mib, 1)
        if event.load_seconds is not None:
            fields["load_seconds"] = round(event.load_seconds, 3)
        message = {
            "load": "model cached",
            "evict": "model evicted",
            "refuse": "model refused: over the pool's budget",
            "fail": "model load failed",
        }[event.kind]
        if event.kind in ("refuse", "fail"):
            log.warning(message, extra={**fields, "reason": event.reason})
        else:
            log.info(message, extra=fields)
        values: dict[str, Any] = {}
        if event.kind == "load":
            assert footprint is not None and event.load_seconds is not None
            values = {
                "ModelLoads": (COUNT, 1),
                "ModelLoadTime": (MILLISECONDS, event.load_seconds * 1000),
                "ModelFootprint": (MEGABYTES, footprint.host_mib),
            }
        elif event.kind == "evict":
            values = {"ModelEvictions": (COUNT, 1)}
        elif event.kind == "refuse":
            values = {"ModelLoadRefusals": (COUNT, 1)}
        if values and self._emit:
            emit_metrics(values, {"pool": self._pool}, pool=self._pool, model=event.model)
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        """The pool's gauges and state, when due (or ``force``)."""
        if self._cache is None:
            return
        now = time.monotonic()
        if self._emit and (force or now - self._gauged >= GAUGE_SECONDS):
            self._gauged = now
            snapshot = self._cache.snapshot()
            emit_metrics(
                {
                    "PoolResidentMemory": (MEGABYTES, snapshot["held_mib"]),
                    "PoolResidentVersions": (COUNT, len(snapshot["resident"])),
                },
                pool=self._pool,
            )
        if self._state_file is not None and (force or now - self._stated >= STATE_SECONDS):
            self._stated = now
            self._write_state()

    def _write_state(self) -> None:
        assert self._cache is not None and self._state_file is not None
        state = {
            "pool": self._pool,
            "worker": self._worker_id,
            "pid": os.getpid(),
            "updated_at": round(time.time(), 3),
            **self._cache.snapshot(),
        }
        with self._lock:  # the loader thread and the model's thread both write it
            staged = self._state_file.with_name(f".{self._state_file.name}.tmp")
            try:
                staged.write_text(json.dumps(state) + "\n")
                os.replace(staged, self._state_file)  # a reader sees one state or the next
            except OSError:
                log.exception("pool state not written", extra={"path": str(self._state_file)})


class PoolWorker(WorkerProcess):
    """A pool's worker: the stages of each of its models, one model cache within the
    pool's budget, and the line (``PoolLoop``) on the worker's main thread."""

    def __init__(
        self,
        *,
        pool: str,
        lanes: Mapping[str, ModelLanes],
        wiring: Wiring,
        load_runtime: RuntimeLoader,
        memory_budget_mib: int,
        device_memory_budget_mib: int | None = None,
        meter: Meter | None = None,
        state_file: Path | None = None,
        gates: OverflowGates | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        super().__init__(wiring.worker_id)
        self.pool = pool
        self.costs = wiring.costs
        self.models = list(lanes)
        # A CPU pool's models taken on overflow (a gate each), and a pool that
        # overflows: its word that this worker runs (``switchyard_worker.overflow``).
        self.gates = gates
        self.overflow = sorted(gates.models) if gates is not None else []
        self._heartbeat = heartbeat
        self._wake = threading.Event()
        self.report = PoolReport(pool, wiring.worker_id, state_file, wiring.emit)
        self.cache = ModelCache(
            load=load_runtime,
            memory_budget_mib=memory_budget_mib,
            device_memory_budget_mib=device_memory_budget_mib,
            meter=meter,
            on_event=self.report.event,
            on_ready=self._wake.set,
        )
        self.report.watch(self.cache)
        self.by_model = {
            model: ModelStages.wire(
                model,
                (model_lanes.realtime, model_lanes.batch),
                wiring,
                stopping=self._stopping,
                load_runtime=load_runtime,
                model_cache=self.cache,
                on_hold=self._wake.set,
                gate=gates.gate(model) if gates is not None and model in gates.models else None,
            )
            for model, model_lanes in lanes.items()
        }
        self.stages = list(self.by_model.values())
        self._loop = PoolLoop(
            stopping=self._stopping,
            stages=self.by_model,
            cache=self.cache,
            wake=self._wake,
            report=self.report,
        )

    @property
    def loop(self) -> PoolLoop:
        return self._loop

    def describe(self) -> dict[str, Any]:
        described = {"pool": self.pool, "models": self.models, "worker": self.worker_id}
        return {**described, "overflow": self.overflow} if self.overflow else described

    def run(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until stopped (``WorkerProcess.run``); a pool that overflows says
        its worker runs from when it is ready until it stops."""
        heartbeat = self._heartbeat

        def now_ready() -> None:
            if heartbeat is not None:
                heartbeat.start()
            if ready:
                ready()

        try:
            super().run(now_ready)
        finally:
            if heartbeat is not None:
                heartbeat.stop()

    def preload(self) -> None:
        """Read each model's versions; none is loaded before its first request (a
        pool's worker is ready at once, and loads what its work asks for)."""
        for stages in self.stages:
            stages.versions.all()
        self.report.tick(force=True)

    def stop(self, *_: Any) -> None:
        super().stop()
        self._wake.set()
