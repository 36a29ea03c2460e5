"""Batch jobs on the local platform: memory as the file grows, and realtime traffic
beside a running job.

**Memory.** ``digits-cnn`` alone with one worker. Files of ``SIZES`` lines (8×8
images, one per line) are dropped one after another in the drop bucket, as a data
team drops them: an S3 PUT and nothing else. Every process of the platform is
sampled for RSS twice a second while each job runs; reported per job are each
process's RSS when the job was dropped and its peak while it ran, the job's wall
time (its own stamps: created → finished) and lines per second. A process whose
peak does not grow with the file holds a bounded part of it; the emulator holds
the data itself (the file, its chunks, results and output), so it grows with it.

**Realtime beside a job.** ``minilm-embed`` alone with one worker. Open-loop sync
predicts of one sentence at ``RATE`` per second for ``SECONDS``, first alone, then
while a job of ``JOB_LINES`` sentences runs on the batch lane; p50 and p99 of both.
The job's throughput (lines per second, created → finished) is set beside the
model's own batched limit on the job's lines (``BATCH_SIZE`` of them, taken evenly
across the file) in the bench's process at the worker's batch size, measured just
before the platform starts and just after it stops (``bench.backlog.model_limit``).
The whole run (a fresh platform, realtime alone, the job and realtime beside it) is
repeated ``REPEATS`` times and the median of each ratio is the figure: a p99 of 240
answers is their third slowest, and the machine's speed drifts within a run (the
model's own limit has moved by a fifth between its two measurements).
"""

from __future__ import annotations

import dataclasses
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.backlog import BATCH_SIZE, ONE_WORKER, adapters_of, model_limit
from bench.common import TENSOR_MODEL, TEXT_MODEL, median, ratio, sentences
from bench.end_to_end import predict_sender
from bench.loadgen import run_step
from bench.model_limit import LoadedModel
from bench.platform_proc import local_platform
from bench.soak import MemorySampler
from harness.local_platform import RunningPlatform

SIZES = {"full": (10_000, 100_000, 1_000_000), "quick": (2_000, 10_000)}
JOB_LINES = {"full": 100_000, "quick": 3_000}
RATE = 4.0  # realtime requests per second, beside the job
SECONDS = {"full": 60.0, "quick": 15.0}
REPEATS = {"full": 3, "quick": 1}
SAMPLE_EVERY_S = 0.5
JOB_LIMIT_S = 3_600.0


def image_lines(path: Path, count: int, seed: int = 11) -> int:
    """A JSON Lines file of ``count`` 8×8 images (values 0-16); its size in bytes."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for _ in range(count):
            out.write(json.dumps([rng.randint(0, 16) for _ in range(64)]) + "\n")
    return path.stat().st_size


def sentence_lines(path: Path, count: int) -> int:
    texts = sentences()
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps(f"{texts[i % len(texts)]} ({i})") + "\n")
    return path.stat().st_size


def drop(platform: RunningPlatform, model: str, path: Path) -> tuple[str, str]:
    """Put the file in the drop bucket under the default tenant's prefix, in one PUT,
    as a data team would; the tenant and the job id its bytes make."""
    from switchyard.jobs import job_id_for

    adapters = adapters_of(platform)
    s3 = adapters.client("s3")
    bucket = platform.info["names"]["batch_drop_bucket"]
    tenant = platform.info["default_tenant"]
    key = f"{tenant}/{model}/{path.name}"
    with path.open("rb") as body:
        etag = s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
    return tenant, job_id_for(bucket, key, etag)


def wait_for_job(platform: RunningPlatform, tenant: str, job_id: str) -> Any:
    """The job once it has ended (or the last seen after ``JOB_LIMIT_S``)."""
    from switchyard.jobs import TERMINAL, JobStore

    adapters = adapters_of(platform)
    store = JobStore(adapters.client("dynamodb"), platform.info["names"]["jobs_table"])
    deadline = time.monotonic() + JOB_LIMIT_S
    job = None
    while time.monotonic() < deadline:
        job = store.get(tenant, job_id)
        if job is not None and job.status in TERMINAL:
            return job
        time.sleep(1.0)
    return job


def job_figures(job: Any) -> dict[str, Any]:
    lines = job.lines_done if job is not None else 0
    seconds = (job.finished_at - job.created_at) if job is not None and job.finished_at else None
    return {
        "status": job.status if job is not None else "not recorded",
        "lines": lines,
        "lines_failed": job.lines_failed if job is not None else None,
        "chunks": job.chunks if job is not None else None,
        "seconds": round(seconds, 1) if seconds else None,
        "lines_per_s": round(lines / seconds, 1) if seconds else None,
    }


def memory_by_process(
    sampler: MemorySampler, start_s: float, end_s: float
) -> dict[str, dict[str, float]]:
    """Per process: its RSS at ``start_s`` and its peak until ``end_s`` (MiB)."""
    out: dict[str, dict[str, float]] = {}
    for proc in list(sampler.processes.values()):
        inside = [mib for t, mib in proc["samples"] if start_s <= t <= end_s]
        before = [mib for t, mib in proc["samples"] if t <= start_s]
        if not inside:
            continue
        name = proc["process"]
        if name in out:  # a second process of the same kind (a replaced worker)
            name = f"{name} ({proc['pid']})"
        out[name] = {
            "at_drop_mib": before[-1] if before else inside[0],
            "peak_mib": max(inside),
        }
    return out


def memory_run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    mode = "quick" if quick else "full"
    jobs = []
    with (
        local_platform(keep_models={TENSOR_MODEL}, stage_scaling=ONE_WORKER) as platform,
        tempfile.TemporaryDirectory(prefix="switchyard-bench-jobs-") as folder,
    ):
        origin = time.monotonic()
        sampler = MemorySampler(
            platform.process.pid, origin, [], lambda _: None, every_s=SAMPLE_EVERY_S
        )
        sampler.start()
        try:
            for lines in SIZES[mode]:
                path = Path(folder) / f"images-{lines}.jsonl"
                size = image_lines(path, lines)
                log(f"  dropping {lines:,} lines ({size / 2**20:.1f} MiB) for {TENSOR_MODEL}")
                start = time.monotonic() - origin
                tenant, job_id = drop(platform, TENSOR_MODEL, path)
                job = wait_for_job(platform, tenant, job_id)
                end = time.monotonic() - origin
                path.unlink()
                figures = {
                    "lines_in_file": lines,
                    "file_mib": round(size / 2**20, 1),
                    **job_figures(job),
                    "memory": memory_by_process(sampler, start, end),
                }
                log(f"    {json.dumps(figures)}")
                jobs.append(figures)
        finally:
            sampler.stopped.set()
            sampler.join(5)
    return {"model": TENSOR_MODEL, "sample_every_s": SAMPLE_EVERY_S, "jobs": jobs}


def realtime_step(platform: RunningPlatform, seconds: float, seed: int) -> dict[str, Any]:
    send = predict_sender(TEXT_MODEL, platform.api_key, sentences())
    return run_step(platform.url, send, RATE, seconds, seed=seed, timeout_s=30.0).summary()


def spread_lines(path: Path, count: int) -> list[Any]:
    """``count`` inputs of a JSON Lines file, taken evenly across it."""
    with path.open() as source:
        lines = source.readlines()
    step = max(1, len(lines) // count)
    return [json.loads(line) for line in lines[::step][:count]]


def realtime_once(model: LoadedModel, path: Path, quick: bool) -> dict[str, Any]:
    """One run on a fresh platform: realtime alone, then beside a job of ``path``'s
    lines, with the model's limit on those lines measured before and after."""
    mode = "quick" if quick else "full"
    before = model_limit(model, quick)
    with local_platform(keep_models={TEXT_MODEL}, stage_scaling=ONE_WORKER) as platform:
        alone = realtime_step(platform, SECONDS[mode], seed=1)
        tenant, job_id = drop(platform, TEXT_MODEL, path)
        finished: list[Any] = []
        waiter = threading.Thread(
            target=lambda: finished.append(wait_for_job(platform, tenant, job_id)),
            daemon=True,
        )
        waiter.start()
        time.sleep(5.0)  # the split has begun and chunks are on the batch lane
        beside = realtime_step(platform, SECONDS[mode], seed=2)
        still_running = waiter.is_alive()
        waiter.join(JOB_LIMIT_S)
        job = job_figures(finished[0] if finished else None)
    after = model_limit(model, quick)
    limit = (before + after) / 2
    p99_ratio = ratio(beside["p99_ms"], alone["p99_ms"])
    return {
        "alone": alone,
        "beside_job": beside,
        "job_ran_throughout": still_running,
        "p99_beside_over_alone": round(p99_ratio, 2) if p99_ratio else None,
        "job": job,
        "model_limit_before": round(before, 1),
        "model_limit_after": round(after, 1),
        "job_share_of_model_limit": round(ratio(job["lines_per_s"], limit) or 0.0, 3),
    }


def realtime_run(model: LoadedModel, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    mode = "quick" if quick else "full"
    lines = JOB_LINES[mode]
    runs = []
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-jobs-") as folder:
        path = Path(folder) / f"sentences-{lines}.jsonl"
        sentence_lines(path, lines)
        # The model's limit on the job's own lines: each carries its line number, a
        # few tokens more than the bench's sentences (~15 % slower alone).
        model = dataclasses.replace(model, inputs=spread_lines(path, BATCH_SIZE))
        for i in range(REPEATS[mode]):
            log(
                f"  realtime at {RATE} req/s for {SECONDS[mode]} s alone, then beside a job "
                f"of {lines:,} sentences, on a fresh platform (run {i + 1} of {REPEATS[mode]})"
            )
            runs.append(realtime_once(model, path, quick))
            log(f"    {json.dumps(runs[-1])}")
    return {
        "model": TEXT_MODEL,
        "batch_size": BATCH_SIZE,
        "rate": RATE,
        "seconds": SECONDS[mode],
        "job_lines": lines,
        "repeats": REPEATS[mode],
        "runs": runs,
        "median_p99_beside_over_alone": median(
            [r["p99_beside_over_alone"] for r in runs if r["p99_beside_over_alone"]]
        ),
        "median_job_share_of_model_limit": median([r["job_share_of_model_limit"] for r in runs]),
    }
