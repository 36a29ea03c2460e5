"""End to end on the local platform: real processes (emulator, router, workers)
driven over HTTP by the open-loop load generator.

Sync predicts of one input each, with a generous deadline (``x-deadline-ms``
10000), so that a 202 means the platform could not answer at all in time and is
counted as a miss. Each ladder stops at the first rate it does not sustain (p99
under 500 ms with no miss or error), then halves the gap past it twice
(``loadgen.run_ladder``). The same ladder runs with micro-batching on
(the manifest's ``max_batch_size``) and off (``max_batch_size = 1``), each on a
freshly started platform; the batching gain is the ratio of the two sustainable
rates. The path of one request is taken from the ``timings`` the platform returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from bench.common import (
    TENSOR_MODEL,
    TEXT_MODEL,
    batching_of,
    digit_images,
    median,
    ratio,
    sentences,
)
from bench.loadgen import Sender, StepResult, run_ladder, run_sequential, sustainable_rate
from bench.platform_proc import local_platform
from bench.proc_cpu import CpuMeter
from harness.local_platform import RunningPlatform

DEADLINE_MS = 10_000
STAGES = (
    ("router", "router_ms"),
    ("enqueue", "enqueue_ms"),
    ("queue wait", "queue_wait_ms"),
    ("batch wait", "batch_wait_ms"),
    ("compute", "compute_ms"),
)


def ladder(quick: bool) -> tuple[list[float], float]:
    """Offered rates (requests/s) and seconds per step; the same for every target."""
    if quick:
        return [5, 10, 20, 40, 80, 160, 320], 2.0
    return [2, 4, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 160, 200, 240, 320], 10.0


def predict_sender(model: str, api_key: str, inputs: Sequence[Any]) -> Sender:
    headers = {"x-api-key": api_key, "x-deadline-ms": str(DEADLINE_MS)}

    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        response = await client.post(
            f"/v1/models/{model}/predict",
            json={"inputs": [inputs[i % len(inputs)]]},
            headers=headers,
        )
        body = None
        if response.status_code == 200:
            body = {"timings": response.json().get("timings", {})}
        return response.status_code, body

    return send


def breakdown(
    timings: Sequence[dict[str, float]], client_ms: Sequence[float], result_write_ms: float | None
) -> dict[str, Any]:
    """Mean milliseconds per stage of the path (means add up to the total), with
    each stage's median beside it. The platform records no separate time for the
    result write: it lies inside ``pickup_ms`` (from the worker's completion stamp to
    the router's answer), so it is split out with the PutItem latency measured
    against the same emulator by the AWS-calls section."""
    if not timings:
        return {}

    def mean(key: str) -> float:
        values = [t.get(key, 0.0) for t in timings]
        return sum(values) / len(values)

    stages: list[dict[str, Any]] = []
    for name, key in STAGES:
        stages.append(
            {
                "stage": name,
                "mean_ms": mean(key),
                "p50_ms": median([t.get(key, 0.0) for t in timings]),
            }
        )
    pickup = mean("pickup_ms")
    write = min(result_write_ms, pickup) if result_write_ms is not None else 0.0
    stages.append({"stage": "result write (est.)", "mean_ms": write, "p50_ms": write})
    stages.append(
        {
            "stage": "result pick-up",
            "mean_ms": pickup - write,
            "p50_ms": median([t.get("pickup_ms", 0.0) for t in timings]) - write,
        }
    )
    total = mean("total_ms")
    accounted = sum(s["mean_ms"] for s in stages)
    stages.append(
        {"stage": "other in router", "mean_ms": max(total - accounted, 0.0), "p50_ms": None}
    )
    client = sum(client_ms) / len(client_ms) if client_ms else total
    stages.append(
        {"stage": "HTTP, server and client", "mean_ms": max(client - total, 0.0), "p50_ms": None}
    )
    for s in stages:
        s["mean_ms"] = round(s["mean_ms"], 2)
        s["p50_ms"] = None if s["p50_ms"] is None else round(s["p50_ms"], 2)
        s["share"] = round(s["mean_ms"] / client, 3) if client else None
    largest = max(stages, key=lambda s: s["mean_ms"])
    return {
        "requests": len(timings),
        "client_latency_mean_ms": round(client, 2),
        "client_latency_p50_ms": round(median(client_ms), 2) if client_ms else None,
        "platform_total_mean_ms": round(total, 2),
        "mean_batch_size": _mean_present(timings, "batch_size"),
        "stages": stages,
        "largest_stage": largest["stage"],
    }


def _mean_present(timings: Sequence[dict[str, float]], key: str) -> float | None:
    """The mean of ``key`` over the answers that carry it (None if none does)."""
    values = [t[key] for t in timings if key in t]
    return round(sum(values) / len(values), 2) if values else None


def _timings(result: StepResult) -> tuple[list[dict[str, float]], list[float]]:
    ok = [o for o in result.outcomes if o.kind == "ok" and o.body]
    return [o.body["timings"] for o in ok], [o.latency_ms or 0.0 for o in ok]


def measure_platform(
    platform: RunningPlatform,
    model: str,
    inputs: Sequence[Any],
    quick: bool,
    log: Callable[[str], None],
    result_write_ms: float | None,
    one_request: bool,
) -> dict[str, Any]:
    url, key = platform.url, platform.api_key
    send = predict_sender(model, key, inputs)
    run_sequential(url, send, 5 if quick else 20)  # warm-up: connections, caches, model
    out: dict[str, Any] = {"startup_seconds": platform.info.get("startup_seconds")}
    if one_request:
        seq = run_sequential(url, send, 10 if quick else 40)
        ok = [o for o in seq if o.kind == "ok" and o.body]
        out["one_request"] = breakdown(
            [o.body["timings"] for o in ok], [o.latency_ms or 0.0 for o in ok], result_write_ms
        )
    rates, seconds = ladder(quick)
    per_rate: dict[str, Any] = {}

    def keep(result: StepResult) -> None:
        timings, client = _timings(result)
        per_rate[str(result.rate)] = breakdown(timings, client, result_write_ms)

    log(f"ladder for {model} at {url}")
    meter = CpuMeter(platform.process.pid)
    steps = run_ladder(
        url,
        send,
        rates,
        seconds,
        log,
        keep=keep,
        meter=meter,
        retries=0 if quick else 2,
        settle=lambda: wait_drained(platform, model),
    )
    rate = sustainable_rate(steps)
    out.update(
        {
            "steps": steps,
            "sustainable_rate": rate,
            "breakdown_at_sustainable_rate": per_rate.get(str(rate)) if rate else None,
            "batching_by_rate": batching_by_rate(steps, per_rate),
        }
    )
    return out


def batching_by_rate(
    steps: Sequence[dict[str, Any]], per_rate: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """How the worker batched at each step of the ladder, from the answers' timings:
    the mean batch an answer ran in, and the queue wait, batch wait and compute of
    its path (mean and median)."""
    out = []
    for rate in dict.fromkeys(s["rate"] for s in steps):
        path = per_rate.get(str(rate)) or {}
        stages = {s["stage"]: s for s in path.get("stages", [])}
        row: dict[str, Any] = {
            "rate": rate,
            "answers": path.get("requests", 0),
            "mean_batch_size": path.get("mean_batch_size"),
        }
        for stage in ("queue wait", "batch wait", "compute"):
            got = stages.get(stage, {})
            row[stage.replace(" ", "_") + "_ms"] = {
                "mean": got.get("mean_ms"),
                "p50": got.get("p50_ms"),
            }
        out.append(row)
    return out


def wait_drained(platform: RunningPlatform, model: str, limit_s: float = 90) -> float:
    """Waits until the model's realtime queue is empty, so that the backlog left by an
    overloaded step does not run during the next measurement. Returns seconds waited."""
    started = time.monotonic()
    while platform.queue_depth(model) and time.monotonic() - started < limit_s:
        time.sleep(1)
    return round(time.monotonic() - started, 1)


def run(quick: bool, log: Callable[[str], None], result_write_ms: float | None) -> dict[str, Any]:
    texts = sentences()
    on_models = {TEXT_MODEL} if quick else {TEXT_MODEL, TENSOR_MODEL}
    out: dict[str, Any] = {"deadline_ms": DEADLINE_MS, "max_batch_size": batching_of(TEXT_MODEL)[0]}
    log("starting the local platform (micro-batching on)")
    with local_platform(keep_models=on_models) as platform:
        out["batching_on"] = measure_platform(
            platform, TEXT_MODEL, texts, quick, log, result_write_ms, one_request=True
        )
        if not quick:
            out["batching_on"]["drained_after_s"] = wait_drained(platform, TEXT_MODEL)
            out["digits_batching_on"] = measure_platform(
                platform, TENSOR_MODEL, digit_images(), quick, log, result_write_ms, False
            )
    time.sleep(2)
    log("starting the local platform (micro-batching off: max_batch_size = 1)")
    with local_platform(
        keep_models={TEXT_MODEL}, settings={TEXT_MODEL: {"max_batch_size": 1}}
    ) as platform:
        out["batching_off"] = measure_platform(
            platform, TEXT_MODEL, texts, quick, log, result_write_ms, one_request=False
        )
    on = out["batching_on"]["sustainable_rate"]
    off = out["batching_off"]["sustainable_rate"]
    out["batching_gain"] = ratio(on, off)
    return out
