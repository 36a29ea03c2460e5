"""Worker entry point (the ECS task's command, and the local supervisor's process)."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
from pathlib import Path

from switchyard.artifacts import fetch_artifact
from switchyard.registry import ModelVersion
from switchyard.settings import SettingsError, WorkerSettings, get_settings
from switchyard.wiring import build_adapters
from switchyard_worker.runtimes import ModelRuntime, load_runtime
from switchyard_worker.worker import Worker


def main() -> None:
    try:
        settings = get_settings(WorkerSettings)
    except SettingsError as exc:
        raise SystemExit(f"switchyard worker: {exc}") from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if settings.worker_model not in settings.queues:
        raise SystemExit(f"SWITCHYARD_WORKER_MODEL: no queues for {settings.worker_model!r}")
    adapters = build_adapters(settings)
    lanes = adapters.queues[settings.worker_model]
    s3 = adapters.client("s3")
    cache = Path(settings.artifacts_cache)

    def runtime_for(record: ModelVersion) -> ModelRuntime:
        artifact = fetch_artifact(s3, record.artifact_uri, record.sha256, cache)
        return load_runtime(record, artifact, cache / "unpacked")

    worker = Worker(
        model=settings.worker_model,
        worker_id=f"{socket.gethostname()}-{os.getpid()}",
        realtime=lanes.realtime,
        batch=lanes.batch,
        registry=adapters.registry,
        results=adapters.results,
        payloads=adapters.payloads,
        load_runtime=runtime_for,
        visibility_timeout=settings.visibility_timeout_seconds,
        poll_wait_seconds=settings.poll_wait_seconds,
        prediction_log=adapters.prediction_log(settings.prediction_log_stream),
        max_receive_count=settings.max_receive_count,
        result_ttl_seconds=settings.result_ttl_seconds,
    )
    worker.install_signal_handlers()
    # `kill -USR1` prints every thread's stack to the log: how to see what a worker
    # that does not stop is doing (the local supervisor sends it before a SIGKILL).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    worker.preload()

    def ready() -> None:
        if settings.ready_file:
            Path(settings.ready_file).write_text(worker.worker_id)

    worker.run(ready)


if __name__ == "__main__":
    main()
