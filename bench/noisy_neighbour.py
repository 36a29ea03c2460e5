"""Noisy neighbour: one tenant's flood of async work does not hold up another
tenant's sync calls to the same model.

``minilm-embed`` alone with one worker (``ONE_WORKER``: the contention is on one
worker, as on a model at its most tasks) on a fresh local platform. Tenant B (the
demo tenant that is not the platform's first) calls predict sync, one sentence a
request, with the model's own deadline, open loop at ``RATE`` requests/s for
``SECONDS`` (``loadgen.run_step``): first alone, then under a flood from tenant A
(the first demo tenant): ``ASYNC_REQUESTS`` one-sentence async predicts submitted at
once (``bench.backlog.submit``, ``IN_FLIGHT`` at a time), and a batch job of
``JOB_LINES`` sentences dropped in the drop bucket (its chunks ride the batch lane).
B's flood window begins once A's submissions are in and its job is dropped (the
platform's one local router process is not what is measured: in AWS each request
has a Lambda of its own); A's queued work is read at both ends of the window, so the
page can say the flood lasted through it.

Measured: B's p50/p99 alone and under the flood, its 202s (the deadline passed in
the queue) and errors, where its answers' time went (their ``timings``); A's drain
rate (inputs per second from its first submission to its last result, from the
results' own stamps) and the job's lines per second; and one batch's time, in the
same run: the median ``compute_ms`` that A's requests answered within B's flood
window record (the model's time for the batch each rode in), with their median
batch size. The goal (``bench/goals.py``): B gets no 202 and no error, and its p99
under the flood is at most 1.5× its p99 alone plus one batch's time.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.backlog import ONE_WORKER, adapters_of, drain, submit
from bench.batch_jobs import drop, job_figures, sentence_lines, wait_for_job
from bench.common import TEXT_MODEL, median, percentile, sentences
from bench.loadgen import Sender, StepResult, run_sequential, run_step
from bench.platform_proc import local_platform
from harness.local_platform import RunningPlatform

RATE = 2.0  # B's sync requests per second
SECONDS = {"full": 30.0, "quick": 10.0}
ASYNC_REQUESTS = {"full": 3_000, "quick": 600}
JOB_LINES = {"full": 3_000, "quick": 300}
P99_FACTOR = 1.5  # the goal: B's p99 under the flood <= this x alone + one batch
WARM_UP = 8
SEED = 47
DRAIN_LIMIT_S = 900.0


def tenants(platform: RunningPlatform) -> tuple[str, str]:
    """Tenant A (the platform's first, whose key and drop prefix the bench uses by
    default) and tenant B (another demo tenant)."""
    a = platform.info["default_tenant"]
    b = next(t for t in platform.keys if t != a)
    return a, b


def sync_sender(api_key: str, texts: Sequence[str]) -> Sender:
    """B's request ``i``: one sentence, sync, the model's own deadline; its body says
    when it left and came back (epoch seconds) and, answered, its ``timings``."""

    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        sent = time.time()
        response = await client.post(
            f"/v1/models/{TEXT_MODEL}/predict",
            json={"inputs": [f"{texts[i % len(texts)]} ({i})"]},
            headers={"x-api-key": api_key},
        )
        body: dict[str, Any] = {"sent": sent, "answered": time.time()}
        if response.status_code in (200, 202):
            answer = response.json()
            body["request_id"] = answer.get("request_id")
            body["timings"] = answer.get("timings") or {}
        return response.status_code, body

    return send


def queued(platform: RunningPlatform) -> dict[str, int]:
    """Messages on the model's lanes, visible or in flight."""
    return {lane: platform.queue_depth(TEXT_MODEL, lane) for lane in ("realtime", "batch")}


def b_figures(result: StepResult) -> dict[str, Any]:
    """B's step: counts, latency, and the median of each stage its answers timed."""
    summary = result.summary()
    timings = [o.body["timings"] for o in result.outcomes if o.kind == "ok" and o.body]
    stages = ("queue_wait_ms", "batch_wait_ms", "compute_ms", "pickup_ms", "batch_size")
    return {
        "sent": summary["sent"],
        "ok": summary["ok"],
        "miss_202": summary["miss_202"],
        "errors": summary["errors"],
        "timeouts": summary["timeouts"],
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "max_ms": summary["max_ms"],
        "stages_p50": {
            s: round(median([float(t[s]) for t in timings if s in t]), 1)
            if any(s in t for t in timings)
            else None
            for s in stages
        },
        # where the slowest answers' time went (the tail the goal is about)
        "slowest": [
            {"latency_ms": round(o.latency_ms, 1)}
            | {s: o.body["timings"].get(s) for s in (*stages, "total_ms") if o.body}
            for o in sorted(
                (o for o in result.outcomes if o.kind == "ok" and o.latency_ms is not None),
                key=lambda o: o.latency_ms or 0.0,
            )[-3:]
        ],
    }


def window(result: StepResult) -> tuple[float, float]:
    """From B's first send to its last answer (epoch seconds)."""
    bodies = [o.body for o in result.outcomes if isinstance(o.body, dict) and "sent" in o.body]
    return min(b["sent"] for b in bodies), max(b["answered"] for b in bodies)


def a_figures(
    records: Sequence[Any], started: float, b_window: tuple[float, float]
) -> dict[str, Any]:
    """A's async requests: how many ended, its drain rate from its first submission to
    its last result, one batch's time (the median model time of A's largest batches,
    which run while no sync call has come for a while: a sync call arriving then waits
    for one), and the batches it rode in within B's window (smaller: while sync calls
    come in, async batches are an eighth of the model's most)."""
    done = [r for r in records if r is not None and r.status == "done" and r.completed_at]
    inputs = sum(len(r.outputs or []) for r in done)
    finished = max((r.completed_at for r in done), default=started)
    seconds = finished - started
    t0, t1 = b_window
    inside = [r for r in done if t0 <= r.completed_at <= t1 and "compute_ms" in r.timings]
    after_b = [r for r in done if r.completed_at > t1]
    timed = [r for r in done if "compute_ms" in r.timings]
    largest = max((r.timings.get("batch_size", 0.0) for r in timed), default=0.0)
    whole = [r for r in timed if r.timings.get("batch_size") == largest]
    return {
        "requests": len(records),
        "done": len(done),
        "not_done": len(records) - len(done),
        "drain_seconds": round(seconds, 1),
        "inputs_per_s": round(inputs / seconds, 1) if seconds > 0 else None,
        "answered_in_b_window": len(inside),
        "answered_after_b_window": len(after_b),
        "batch_ms": round(median([r.timings["compute_ms"] for r in whole]), 1) if whole else None,
        "batch_ms_p90": round(percentile([r.timings["compute_ms"] for r in whole], 90), 1)
        if whole
        else None,
        "batch_size": largest or None,
        "in_window_batch_ms": round(median([r.timings["compute_ms"] for r in inside]), 1)
        if inside
        else None,
        "in_window_batch_size": median([r.timings.get("batch_size", 0.0) for r in inside])
        if inside
        else None,
    }


def flood(platform: RunningPlatform, requests: int, job_path: Path) -> dict[str, Any]:
    """A's flood: its async predicts submitted, then its job dropped; the ids
    accepted, the failures, and when the submissions began and ended."""
    a, _ = tenants(platform)
    texts = sentences()
    bodies = [[f"{texts[i % len(texts)]} [{i}]"] for i in range(requests)]
    ids, failures, started = asyncio.run(submit(platform, bodies, platform.keys[a]))
    submitted = time.time()
    job = drop(platform, TEXT_MODEL, job_path)
    return {
        "ids": ids,
        "failures": failures,
        "started": started,
        "submitted": submitted,
        "job": job,
    }


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    mode = "quick" if quick else "full"
    seconds, requests, lines = SECONDS[mode], ASYNC_REQUESTS[mode], JOB_LINES[mode]
    with (
        local_platform(keep_models={TEXT_MODEL}, stage_scaling=ONE_WORKER) as platform,
        tempfile.TemporaryDirectory(prefix="switchyard-bench-noisy-") as folder,
    ):
        a, b = tenants(platform)
        send = sync_sender(platform.keys[b], sentences())
        run_sequential(platform.url, send, WARM_UP, timeout_s=30)
        log(f"  B ({b}): {RATE:g} sync req/s for {seconds:g} s alone")
        alone = run_step(platform.url, send, RATE, seconds, seed=SEED, timeout_s=30)
        job_path = Path(folder) / f"sentences-{lines}.jsonl"
        sentence_lines(job_path, lines)
        log(f"  A ({a}): {requests:,} async predicts and a job of {lines:,} lines")
        a_out = flood(platform, requests, job_path)
        took = a_out["submitted"] - a_out["started"]
        log(f"    A: {len(a_out['ids']):,} submitted in {took:.1f} s")
        queued_at_start = queued(platform)
        log(f"  B: {RATE:g} sync req/s for {seconds:g} s under the flood ({queued_at_start})")
        under = run_step(platform.url, send, RATE, seconds, seed=SEED + 1, timeout_s=30)
        queued_at_end = queued(platform)
        adapters = adapters_of(platform)
        drain(adapters, DRAIN_LIMIT_S)
        job = wait_for_job(platform, *a_out["job"])
        records = [adapters.results.get(a, request_id) for request_id in a_out["ids"]]
    b_alone, b_under = b_figures(alone), b_figures(under)
    a_async = a_figures(records, a_out["started"], window(under))
    return section(
        b_alone,
        b_under,
        a_async
        | {
            "submission_failures": len(a_out["failures"]),
            "submit_seconds": round(a_out["submitted"] - a_out["started"], 1),
        },
        job_figures(job),
        {"at_start": queued_at_start, "at_end": queued_at_end},
        {"a": a, "b": b, "seconds": seconds, "job_lines": lines},
    )


def section(
    alone: dict[str, Any],
    under: dict[str, Any],
    a_async: dict[str, Any],
    job: dict[str, Any],
    a_queued: dict[str, Any],
    setup: dict[str, Any],
) -> dict[str, Any]:
    """The section's figures, and the goal's bound worked out from them."""
    batch_ms = a_async.get("batch_ms")
    bound = (
        round(P99_FACTOR * alone["p99_ms"] + batch_ms, 1)
        if batch_ms is not None and alone.get("p99_ms") is not None
        else None
    )
    p99 = under.get("p99_ms")
    return {
        "model": TEXT_MODEL,
        "tenant_a": setup["a"],
        "tenant_b": setup["b"],
        "rate": RATE,
        "seconds": setup["seconds"],
        "async_requests": a_async["requests"],
        "job_lines": setup["job_lines"],
        "b_alone": alone,
        "b_under_flood": under,
        "a_async": a_async,
        "a_job": job,
        "a_queued": a_queued,
        "p99_factor": P99_FACTOR,
        "p99_bound_ms": bound,
        "b_refused": under["miss_202"] + under["errors"] + under["timeouts"],
        "p99_over_bound": round(p99 / bound, 3) if p99 is not None and bound else None,
    }
