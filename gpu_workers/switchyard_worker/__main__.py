"""Worker entry point (the ECS task's command, and the local supervisor's process).

``python -m switchyard_worker --standby`` is a worker held in reserve by a host that
starts workers on demand (the local supervisor): it imports every runtime's
libraries, then waits for one line on stdin, ``{"env": {...}, "log": path}``, and
becomes that worker (its environment, its log), skipping the interpreter's start
and the imports that dominate a cold start. End of input, unasked, exits quietly.
An ECS task starts a fresh container instead and never runs it.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from switchyard.admission import DynamoDBQueuedCounts, QueuedWork
from switchyard.artifacts import fetch_artifact
from switchyard.budgets import DynamoDBBudgetStore
from switchyard.callbacks import JobEvents
from switchyard.costs import CostLedger
from switchyard.engines import EngineBoard
from switchyard.generation import DynamoDBTokenStream
from switchyard.init_phase import init_phase
from switchyard.jobs import JobStore
from switchyard.overflow import PoolBeats, oldest_ages, queue_name
from switchyard.registry import ModelVersion
from switchyard.settings import SettingsError, WorkerSettings, get_settings
from switchyard.wiring import Adapters, build_adapters
from switchyard_worker.allocator import tune_for_inference
from switchyard_worker.costing import CostKeeper
from switchyard_worker.overflow import Heartbeat, OverflowGates
from switchyard_worker.pool import PoolWorker
from switchyard_worker.runtimes import (
    ModelRuntime,
    choose_device,
    import_libraries,
    load_runtime,
)
from switchyard_worker.stages import collect_less
from switchyard_worker.worker import Wiring, Worker, WorkerProcess, log

# Beside a worker's ready file (``worker-<service>-<n>.ready``): the engine each of
# its generative versions decodes with, ``{"<model>/<version>": "vllm"}``.
ENGINES_SUFFIX = ".engines.json"


def main(standby_seconds: float | None = None) -> None:
    # Before the model allocates anything: its freed activations kept for its next
    # batch (``allocator``).
    allocator = tune_for_inference()
    # The collector is held off until the model is loaded (``init_phase``).
    with init_phase():
        worker, settings = _started(standby_seconds)
    collect_less()

    def ready() -> None:
        if settings.ready_file:
            Path(settings.ready_file).write_text(worker.worker_id)
        log.info(
            "worker ready",
            extra={
                "at": time.time(),
                "worker": worker.worker_id,
                "gc": {
                    "enabled": gc.isenabled(),
                    "frozen": gc.get_freeze_count(),
                    "thresholds": gc.get_threshold(),
                },
                "allocator": allocator,
            },
        )

    worker.run(ready)


def _started(standby_seconds: float | None) -> tuple[WorkerProcess, WorkerSettings]:
    """The worker, wired from its settings: a model's, with its active versions
    loaded, or a pool's, which loads them on first use."""
    log.info(
        "worker starting",
        extra={
            "at": time.time(),
            "standby": standby_seconds is not None,
            "waited_seconds": standby_seconds,
        },
    )
    try:
        settings = get_settings(WorkerSettings)
    except SettingsError as exc:
        raise SystemExit(f"switchyard worker: {exc}") from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    missing = [model for model in settings.served_models if model not in settings.queues]
    if missing:
        names = "SWITCHYARD_WORKER_MODELS" if settings.worker_pool else "SWITCHYARD_WORKER_MODEL"
        raise SystemExit(f"{names}: no queues for {', '.join(map(repr, missing))}")
    adapters = build_adapters(settings)
    s3 = adapters.client("s3")
    cache = Path(settings.artifacts_cache)
    jobs = None
    if settings.jobs_table:
        jobs = JobStore(adapters.client("dynamodb"), settings.jobs_table)

    try:
        device = choose_device(settings.device)
    except RuntimeError as exc:
        raise SystemExit(f"SWITCHYARD_DEVICE: {exc}") from None

    engines: dict[str, str] = {}
    board = EngineBoard(adapters.client("dynamodb"), settings.results_table)

    def runtime_for(record: ModelVersion) -> ModelRuntime:
        began = time.perf_counter()
        artifact = fetch_artifact(s3, record.artifact_uri, record.sha256, cache)
        fetched = time.perf_counter()
        imported = import_libraries([record.runtime])
        runtime = load_runtime(record, artifact, cache / "unpacked", device)
        engine = getattr(runtime, "engine", None)
        if engine is not None and settings.ready_file:
            # Beside the ready file, for the status: which engine runs each version.
            engines[f"{record.model}/{record.version}"] = engine
            Path(settings.ready_file).with_suffix(ENGINES_SUFFIX).write_text(json.dumps(engines))
        if engine is not None:
            _say_engine(board, record, engine)
        log.info(
            "model loaded",
            extra={
                "model": record.model,
                "version": record.version,
                "device": device,
                "engine": engine,
                "engine_fallback": getattr(runtime, "engine_fallback", None),
                "artifact_seconds": round(fetched - began, 3),
                "import_seconds": round(imported, 3),
                "load_seconds": round(time.perf_counter() - fetched - imported, 3),
            },
        )
        return runtime

    wiring = Wiring(
        worker_id=worker_id(),
        service=settings.service,
        costs=_costs(settings, adapters),
        registry=adapters.registry,
        results=adapters.results,
        payloads=adapters.payloads,
        cache=adapters.cache,
        # held for less than the queue's visibility timeout: see held_visibility_seconds
        visibility_timeout=min(
            settings.held_visibility_seconds, settings.visibility_timeout_seconds
        ),
        poll_wait_seconds=settings.poll_wait_seconds,
        prediction_log=adapters.prediction_log(settings.prediction_log_stream),
        max_receive_count=settings.max_receive_count,
        result_ttl_seconds=settings.result_ttl_seconds,
        jobs=jobs,
        job_output_s3=s3,
        job_ended=JobEvents.on_queue(adapters.client("sqs"), settings.drop_queue_url).ended
        if settings.drop_queue_url
        else None,
        tenant_weights=settings.tenant_weights,
        queued=QueuedWork(
            DynamoDBQueuedCounts(adapters.client("dynamodb"), settings.results_table)
        ),
    )
    worker: WorkerProcess
    if settings.worker_pool is not None:
        assert settings.memory_budget_mib is not None  # the settings' own rule
        worker = PoolWorker(
            pool=settings.worker_pool,
            lanes={model: adapters.queues[model] for model in settings.served_models},
            wiring=wiring,
            load_runtime=runtime_for,
            memory_budget_mib=settings.memory_budget_mib,
            device_memory_budget_mib=settings.device_memory_budget_mib,
            state_file=Path(settings.pool_state_file) if settings.pool_state_file else None,
            **_overflow(settings, adapters, wiring.worker_id),
        )
    else:
        lanes = adapters.queues[settings.service]
        worker = Worker(
            model=settings.service,
            worker_id=wiring.worker_id,
            realtime=lanes.realtime,
            batch=lanes.batch,
            registry=wiring.registry,
            results=wiring.results,
            cache=wiring.cache,
            payloads=wiring.payloads,
            load_runtime=runtime_for,
            visibility_timeout=wiring.visibility_timeout,
            poll_wait_seconds=wiring.poll_wait_seconds,
            prediction_log=wiring.prediction_log,
            max_receive_count=wiring.max_receive_count,
            result_ttl_seconds=wiring.result_ttl_seconds,
            jobs=wiring.jobs,
            job_output_s3=wiring.job_output_s3,
            job_ended=wiring.job_ended,
            stream=DynamoDBTokenStream(adapters.client("dynamodb"), settings.results_table),
            stream_flush_seconds=settings.stream_flush_seconds,
            generation_visibility_seconds=settings.generation_visibility_seconds,
            tenant_weights=wiring.tenant_weights,
            queued=wiring.queued,
            costs=wiring.costs,
        )
    worker.install_signal_handlers()
    # `kill -USR1` prints every thread's stack to the log: how to see what a worker
    # that does not stop is doing (the local supervisor sends it before a SIGKILL).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    worker.preload()
    return worker, settings


def worker_id() -> str:
    """This worker's id: its host and process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _say_engine(board: EngineBoard, record: ModelVersion, engine: str) -> None:
    """Which engine runs ``record``, in the results table for whatever names it (the
    Open Inference Protocol's ``platform``); a failed write is logged, not raised."""
    try:
        board.say(record.model, record.version, engine, worker_id())
    except Exception:  # noqa: BLE001 - the version runs all the same
        log.exception("engine not recorded", extra={"model": record.model})


def _costs(settings: WorkerSettings, adapters: Adapters) -> CostKeeper | None:
    """What prices the worker's answers and meters its time (none without rates)."""
    if settings.cost_rates is None:
        return None
    return CostKeeper(
        rates=settings.cost_rates,
        ledger=CostLedger(adapters.client("dynamodb"), settings.results_table),
        service=settings.service,
        worker_id=worker_id(),
        inline_bytes=settings.result_inline_bytes,
        meter_seconds=settings.meter_seconds,
        budgets=DynamoDBBudgetStore(adapters.client("dynamodb"), settings.results_table),
    )


def _overflow(settings: WorkerSettings, adapters: Adapters, worker_id: str) -> dict[str, Any]:
    """A CPU pool's gates over the models it takes on overflow, and a pool that
    overflows: its workers' word that they run (``switchyard_worker.overflow``)."""
    beats = PoolBeats(adapters.client("dynamodb"), settings.results_table)
    out: dict[str, Any] = {}
    if settings.overflow:
        cloudwatch = adapters.client("cloudwatch")
        out["gates"] = OverflowGates(
            settings.overflow,
            queue_names={
                model: [queue_name(q.realtime), queue_name(q.batch)]
                for model, q in settings.queues.items()
                if model in settings.overflow
            },
            running=beats.running,
            ages=lambda names: oldest_ages(cloudwatch, names),
            age_read_seconds=settings.overflow_age_read_seconds,
        )
    if settings.pool_heartbeat:
        assert settings.worker_pool is not None
        out["heartbeat"] = Heartbeat(beats, settings.worker_pool, worker_id)
    return out


def standby() -> None:
    """Import every runtime's libraries, wait for the order, become that worker."""
    tune_for_inference()
    with init_phase():
        import_libraries()
    waiting = time.monotonic()
    line = sys.stdin.readline()
    if not line.strip():
        return  # released without being used
    order = json.loads(line)
    os.environ.clear()
    os.environ.update(order["env"])
    if order.get("log"):
        fd = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        for stream in (1, 2):
            os.dup2(fd, stream)
        os.close(fd)
    main(standby_seconds=round(time.monotonic() - waiting, 3))


if __name__ == "__main__":
    standby() if "--standby" in sys.argv[1:] else main()
