"""Router cold start and the warm router's own CPU per request.

Cold start: a fresh Python process imports ``switchyard_router.app`` and answers
its first request (an async predict: key lookup, version choice, routing document,
queued record, enqueue) through the ASGI app, against the emulator, as a new Lambda
instance would; then a second, warm one. Interpreter start, import and first
request are timed apart.

Warm CPU: the router app in-process on in-memory stand-ins (no AWS at all), a
stand-in worker that completes each request the moment it is enqueued, and
``time.process_time()`` over many sync predicts. The stand-ins' own CPU and that of
the in-process ASGI driver are measured and taken off, so what is left is the
router's: HTTP parsing in FastAPI, key check, validation, the queue message, the
result read and the JSON answer of 384 floats.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.asgi import call, predict_body
from bench.common import ROOT, TEXT_MODEL, accepted_kwargs, median, quiet_output, sentences
from bench.emulator import Emulator


def cold_start(emu: Emulator, runs: int) -> dict[str, Any]:
    tenant, key = next(iter(emu.api_keys.items()))
    env = {
        **os.environ,
        **emu.env,
        "BENCH_ROOT": str(ROOT),
        "BENCH_MODEL": TEXT_MODEL,
        "BENCH_API_KEY": key,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }
    samples = []
    for _ in range(runs):
        spawned = time.time()
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "router_child.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        ended = time.time()
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["interpreter_s"] = row["started_wall"] - spawned
        row["process_total_s"] = ended - spawned
        row["to_first_answer_s"] = row["interpreter_s"] + row["import_s"] + row["first_request_s"]
        samples.append(row)
    keys = ("interpreter_s", "import_s", "first_request_s", "to_first_answer_s", "second_request_s")
    return {
        "runs": runs,
        "statuses": samples[-1]["statuses"],
        **{k.replace("_s", "_ms"): round(1000 * median([s[k] for s in samples]), 1) for k in keys},
    }


class _Noop:
    """A trivial ASGI app: what the in-process driver costs by itself."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def warm_cpu(requests: int) -> dict[str, Any]:
    from bench.stand_ins import (
        MemoryPayloads,
        MemoryQueue,
        MemoryRegistry,
        MemoryResults,
        StaticTenants,
        version_record,
    )
    from switchyard.queues import ModelLanes
    from switchyard.schemas import ResultRecord
    from switchyard_router.app import RouterDeps, create_app
    from switchyard_router.logic import PredictService

    record = version_record(TEXT_MODEL)
    results = MemoryResults()
    embedding = [round(((i * 7919) % 1000) / 1000 - 0.5, 7) for i in range(384)]
    stand_in_cpu = [0.0]
    realtime, batch = MemoryQueue("realtime"), MemoryQueue("batch")

    def instant_worker(body: str) -> None:
        started = time.process_time()
        message = json.loads(body)
        now = time.time()
        results.complete(
            ResultRecord(
                request_id=message["request_id"],
                tenant=message["tenant"],
                model=message["model"],
                version=message["version"],
                status="done",
                outputs=[embedding],
                timings={"received_at": now, "compute_ms": 0.0, "completed_at": now},
                created_at=message["enqueued_at"],
                completed_at=now,
                expires_at=int(message["expires_at"]),
            )
        )
        stand_in_cpu[0] += time.process_time() - started

    realtime.on_send = instant_worker
    service = PredictService(
        **accepted_kwargs(
            PredictService.__init__,
            endpoints={TEXT_MODEL: ModelLanes(realtime=realtime, batch=batch)},
            registry=MemoryRegistry(record),
            results=results,
            payloads=MemoryPayloads(),
            routing=None,
            result_ttl_seconds=86_400,
            claim_check_bytes=200_000,
        )
    )
    deps = RouterDeps(
        **accepted_kwargs(
            RouterDeps,
            service=service,
            tenants=StaticTenants({"bench-key": "acme"}),
            max_body_bytes=1_048_576,
        )
    )
    app = create_app(deps)
    texts = sentences()
    headers = {"x-api-key": "bench-key"}
    path = f"/v1/models/{TEXT_MODEL}/predict"

    async def drive(target: Any, n: int) -> tuple[float, float]:
        for i in range(20):  # warm-up
            await call(target, "POST", path, headers, predict_body([texts[i]]))
        stand_in_cpu[0] = 0.0
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            status, _ = await call(target, "POST", path, headers, predict_body([texts[i % 256]]))
            assert status == 200, status
        return time.process_time() - cpu, time.perf_counter() - wall

    with quiet_output():
        cpu, wall = asyncio.run(drive(app, requests))
        stand_in = stand_in_cpu[0]
        driver, _ = asyncio.run(drive(_Noop(), requests))
    router_cpu = max(cpu - stand_in - driver, 0.0)
    return {
        "requests": requests,
        "router_cpu_ms_per_request": round(1000 * router_cpu / requests, 3),
        "stand_in_cpu_ms_per_request": round(1000 * stand_in / requests, 3),
        "driver_cpu_ms_per_request": round(1000 * driver / requests, 3),
        "wall_ms_per_request": round(1000 * wall / requests, 3),
        "requests_per_cpu_second": round(requests / router_cpu, 1) if router_cpu else None,
    }


def run(emu: Emulator, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    log("  cold start")
    cold = cold_start(emu, 1 if quick else 3)
    log("  warm router CPU")
    return {"cold_start": cold, "warm": warm_cpu(300 if quick else 2000)}
