"""Backlog: async work submitted all at once drains at the workers' speed.

A queue-driven platform exists for backlogs (bursts, scale from zero, batch files).
On a freshly started local platform with ``minilm-embed`` alone and one worker
(``ONE_WORKER``), a burst of async
predicts is sent as fast as the router takes them; the drain ends when the last
result is stored (the latest ``completed_at`` the workers wrote). The rate, in
inputs per second from the first submission to the last result, is set beside the
model's own batched limit, in this process, at the batch size the worker forms (the
manifest's ``max_batch_size``), measured just before the platform starts and again
just after it stops: this machine's speed drifts from minute to minute, so each
burst is compared with the mean of the two measurements that bracket it.

Every input is a short sentence (``SHORT``: 3 to 6 words), and so are the inputs
the model's limit is measured on: with short inputs the model is quick, and what the
platform does per request, not the model, is the bound this section measures.

Two bursts: 200 requests of 16 sentences (the model's batches fill from few
messages) and 1,000 requests of one sentence (every input is a message: receives,
deletes and result writes per input). Then 16 closed-loop sync callers of one
sentence each (each sends its next request when the last is answered) for 30 s:
answers per second against the same limit, where an answer's time went (the stages
its ``timings`` name) and each process's CPU per answer. Each burst and the closed
loop run three times on a fresh platform and the median share is reported beside
every run: the machine is shared, and a neighbour's minute of work moves one run by
a tenth.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.common import TEXT_MODEL, batching_of, median, percentile, ratio, sentences
from bench.end_to_end import breakdown
from bench.loadgen import check_loopback
from bench.model_limit import LoadedModel, throughput
from bench.platform_proc import local_platform
from bench.proc_cpu import CpuMeter
from harness.local_platform import RunningPlatform

BATCH_SIZE, _ = batching_of(TEXT_MODEL)  # the limit is the model's at the worker's max batch
BURSTS = {"full": ((200, 16), (1000, 1)), "quick": ((60, 16), (300, 1))}
REPEATS = {"full": 3, "quick": 1}
IN_FLIGHT = 64  # concurrent submissions: the router takes them as fast as it can
# One worker, as the model's limit is one model on every core: the autoscaler would
# otherwise start more for a large backlog, which on one machine share the cores.
ONE_WORKER = {"max_tasks": 1}
CLOSED_LOOP_CALLERS = 16
SHORT = (3, 6)  # words a sentence


def model_limit(model: LoadedModel, quick: bool) -> float:
    """Inputs per second of the bare model at ``BATCH_SIZE`` (median of rounds)."""
    rounds, seconds = (1, 1.0) if quick else (3, 2.0)
    return median(
        [throughput(model.bare, sentences(words=SHORT), BATCH_SIZE, seconds) for _ in range(rounds)]
    )


async def submit(
    platform: RunningPlatform, bodies: list[list[str]], api_key: str | None = None
) -> tuple[list[str], list[str], float]:
    """Every request sent async at once (``IN_FLIGHT`` at a time), with ``api_key``
    (the default tenant's if None): the ids of those accepted, what went wrong with
    the others (a submission is never retried: without an answer, it may or may not
    have been queued), and when the first left."""
    check_loopback(platform.url)
    import aiohttp

    headers = {"x-api-key": api_key or platform.api_key}
    ids: list[str] = [""] * len(bodies)
    failures: list[str] = []
    gate = asyncio.Semaphore(IN_FLIGHT)
    async with client_session(platform.url, IN_FLIGHT, timeout_s=120) as client:

        async def one(i: int) -> None:
            async with gate:
                try:
                    async with client.post(
                        f"/v1/models/{TEXT_MODEL}/predict",
                        params={"async": "true"},
                        json={"inputs": bodies[i]},
                        headers=headers,
                    ) as response:
                        status, text = response.status, await response.text()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    failures.append(f"submission {i}: {type(exc).__name__} {exc}")
                    return
            if status != 202:
                failures.append(f"submission {i}: {status} {text[:200]}")
                return
            ids[i] = json.loads(text)["request_id"]

        started = time.time()
        await asyncio.gather(*(one(i) for i in range(len(bodies))))
    return [i for i in ids if i], failures, started


def client_session(url: str, connections: int, timeout_s: float) -> Any:
    """The bench's HTTP client for bursts and closed loops: aiohttp, which costs
    this process a tenth of httpx's CPU (1,000 async submissions, 64 at a time:
    ~0.5 CPU-s against 4-7), CPU the two cores would otherwise take from the
    platform under test."""
    import aiohttp

    return aiohttp.ClientSession(
        base_url=url,
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    )


def adapters_of(platform: RunningPlatform) -> Any:
    """The bench's own view of the platform's stores (not the platform's clients)."""
    from switchyard.settings import Settings
    from switchyard.wiring import build_adapters

    platform.act_as_operator()
    return build_adapters(Settings(**platform.info["settings"]))


def drain(adapters: Any, limit_s: float) -> None:
    """Waits until the model's queues are empty: the workers write a result before
    they delete its message, so then every result is stored."""
    lanes = adapters.queues[TEXT_MODEL]
    sqs = adapters.client("sqs")
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        queued = sum(
            int(v)
            for queue in (lanes.realtime, lanes.batch)
            for v in sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=names)[
                "Attributes"
            ].values()
        )
        if not queued:
            break
        time.sleep(1.0)  # the drain is timed by the results' own stamps, not by this


def burst(platform: RunningPlatform, requests: int, per_request: int) -> dict:
    texts = sentences(words=SHORT)
    bodies = [
        [texts[(i * per_request + j) % len(texts)] for j in range(per_request)]
        for i in range(requests)
    ]
    meter = CpuMeter(platform.process.pid)
    meter.start()
    ids, failures, started = asyncio.run(submit(platform, bodies))
    submitted = time.time()
    adapters = adapters_of(platform)
    drain(adapters, limit_s=600)
    cpu, others = meter.stop()  # before the results are read back for the figures
    tenant = platform.info["default_tenant"]
    records = [adapters.results.get(tenant, request_id) for request_id in ids]
    done = [r for r in records if r is not None and r.status == "done"]
    finished = max((r.completed_at or 0.0) for r in done) if done else time.time()
    inputs = sum(len(r.outputs or []) for r in done)
    seconds = finished - started
    rate = inputs / seconds if seconds > 0 else None
    batch_sizes = [r.timings.get("batch_size", 0.0) for r in done if r.timings]
    return {
        "requests": requests,
        "inputs_per_request": per_request,
        "done": len(done),
        "not_done": len(records) - len(done),
        "submissions_failed": len(failures),
        "submission_failures": failures[:5],
        "submit_seconds": round(submitted - started, 2),
        "drain_seconds": round(seconds, 2),
        "inputs_per_s": round(rate, 1) if rate else None,
        "median_batch_size": median(batch_sizes) if batch_sizes else None,
        # CPU seconds per process over the burst (2 cores: 2 s of CPU per second).
        "cpu_seconds": {name: round(v, 2) for name, v in sorted(cpu.items())},
        "cpu_seconds_elsewhere": round(others, 2),
    }


async def closed_loop(platform: RunningPlatform, callers: int, seconds: float) -> dict[str, Any]:
    """``callers`` sync callers, each sending its next one-sentence predict as soon as
    the last is answered, for ``seconds``: answers per second, their latency, and
    where an answer's time went (section 4's ``breakdown`` of the answers' own
    ``timings``)."""
    check_loopback(platform.url)
    texts = sentences(words=SHORT)
    headers = {"x-api-key": platform.api_key}
    latencies: list[float] = []
    errors: list[str] = []
    timings: list[dict[str, float]] = []
    async with client_session(platform.url, callers, timeout_s=60) as client:
        end = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            n = 0
            while time.perf_counter() < end:
                text = f"{texts[(k * 997 + n) % len(texts)]} ({k}.{n})"  # never a repeat
                n += 1
                began = time.perf_counter()
                async with client.post(
                    f"/v1/models/{TEXT_MODEL}/predict", json={"inputs": [text]}, headers=headers
                ) as response:
                    answer = await response.text()
                    if response.status == 200:
                        latencies.append((time.perf_counter() - began) * 1000)
                        timings.append(json.loads(answer).get("timings", {}))
                    else:
                        errors.append(f"{response.status} {answer[:120]}")

        started = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(callers)))
        wall = time.perf_counter() - started
    return {
        "callers": callers,
        "seconds": round(wall, 1),
        "answered": len(latencies),
        "not_answered": len(errors),
        "errors": errors[:3],
        "answered_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
        # No result write is split out of the pick-up (None): the stages as stamped.
        "breakdown": breakdown(timings, latencies, None),
    }


def closed_loop_measured(platform: RunningPlatform, quick: bool) -> dict[str, Any]:
    """The closed-loop callers after a short warm-up, with each process's CPU per
    answered request."""
    asyncio.run(closed_loop(platform, 4, 3.0))  # warm-up: connections, first batches
    meter = CpuMeter(platform.process.pid)
    meter.start()
    result = asyncio.run(closed_loop(platform, CLOSED_LOOP_CALLERS, 10 if quick else 30))
    cpu, others = meter.stop()
    answered = max(result["answered"], 1)
    result.update(
        cpu_ms_per_answer={name: round(1000 * v / answered, 2) for name, v in sorted(cpu.items())},
        cpu_seconds_elsewhere=round(others, 2),
    )
    return result


def bracketed(
    model: LoadedModel, quick: bool, measure: Callable[[RunningPlatform], dict], rate: str
) -> dict:
    """``measure`` on a fresh platform, beside the model's limit just before and after
    it: the share of their mean that the result's ``rate`` reaches."""
    before = model_limit(model, quick)
    with local_platform(keep_models={TEXT_MODEL}, stage_scaling=ONE_WORKER) as platform:
        result = measure(platform)
    after = model_limit(model, quick)
    limit = (before + after) / 2
    result.update(
        model_limit_before=round(before, 1),
        model_limit_after=round(after, 1),
        share_of_model_limit=round(ratio(result[rate], limit) or 0.0, 3),
    )
    return result


def repeated(
    what: str,
    model: LoadedModel,
    quick: bool,
    measure: Callable[[RunningPlatform], dict],
    rate: str,
    log: Callable[[str], None],
) -> list[dict]:
    """``measure`` ``REPEATS`` times, each on a fresh platform beside the model's limit
    (``bracketed``), each run logged."""
    times = REPEATS["quick" if quick else "full"]
    runs = []
    for i in range(times):
        log(f"  {what}, on a fresh platform (run {i + 1} of {times})")
        runs.append(bracketed(model, quick, measure, rate))
        log(f"    {runs[-1]}")
    return runs


def run(model: LoadedModel, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    mode = "quick" if quick else "full"
    out: dict[str, Any] = {"batch_size": BATCH_SIZE, "repeats": REPEATS[mode], "bursts": []}
    for requests, per_request in BURSTS[mode]:
        what = f"{requests} async predicts of {per_request} sentence(s)"
        measure = partial(burst, requests=requests, per_request=per_request)
        runs = repeated(what, model, quick, measure, "inputs_per_s", log)
        out["bursts"].append(
            {
                "requests": requests,
                "inputs_per_request": per_request,
                "median_share_of_model_limit": median([r["share_of_model_limit"] for r in runs]),
                "runs": runs,
            }
        )
    # The closed loop: the median run's figures (by share of the model's limit), with
    # every run beside them.
    what = f"{CLOSED_LOOP_CALLERS} closed-loop sync callers of one sentence"
    measure = partial(closed_loop_measured, quick=quick)
    runs = repeated(what, model, quick, measure, "answered_per_s", log)
    ranked = sorted(runs, key=lambda r: r["share_of_model_limit"])
    out["closed_loop"] = ranked[len(ranked) // 2] | {"runs": runs}
    limits = [
        v
        for b in out["bursts"]
        for r in b["runs"]
        for v in (r["model_limit_before"], r["model_limit_after"])
    ]
    out["model_limit_inputs_per_s"] = round(median(limits), 1)
    return out
