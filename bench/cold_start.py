"""Router cold start and the warm router's own CPU per request.

Cold start: the router function as it deploys (its code asset and the core layer,
built by the CDK app's bundling code; at /var/task and /opt/python when run as
root), started by the Lambda runtime stand-in as a new Lambda instance would be:
interpreter start, the handler module's import (which reads the settings and builds
its clients, as Lambda's init does), then its first event (an async predict: version
choice, queued record, enqueue) against the emulator, and a second, warm one.

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
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.asgi import NoopApp, call, predict_body
from bench.common import TEXT_MODEL, accepted_kwargs, median, quiet_output, sentences
from bench.emulator import Emulator


def cold_start(emu: Emulator, runs: int) -> dict[str, Any]:
    from harness.lambda_events import rest_event
    from stacks.assets import build_layouts
    from switchyard.settings import RouterSettings, to_environment
    from switchyard_local.deployed import LambdaProcess, Launcher, can_mount
    from switchyard_local.supervisor import base_environment

    launcher = Launcher(build_layouts(), exact_paths=can_mount())
    values = emu.provisioned.router_values(None)  # the extension prefetches at init; none here
    values["queues"] = {TEXT_MODEL: emu.provisioned.queues[TEXT_MODEL]}
    env = {**base_environment(), **to_environment(RouterSettings, values)}
    tenant, key = next(iter(emu.api_keys.items()))
    event = rest_event(
        "POST",
        f"/v1/models/{TEXT_MODEL}/predict",
        api_key=key,
        api_key_id=emu.provisioned.api_key_ids[tenant],
        body={"inputs": ["a sentence to embed"]},
        query={"async": "true"},
    )
    bare = launcher.lambda_handler("router")
    samples = []
    with tempfile.TemporaryDirectory(
        prefix="switchyard-cold-start-", ignore_cleanup_errors=True
    ) as folder:
        workdir = Path(folder)
        for run in range(runs):
            began = time.perf_counter()
            subprocess.run([*bare.argv[:-2], "-c", "pass"], env={**env, **bare.env}, check=True)
            interpreter = time.perf_counter() - began
            began = time.perf_counter()
            function = LambdaProcess(bare, env, workdir / f"router-{run}.log")
            ready = time.perf_counter()
            first = function.invoke(event)
            answered = time.perf_counter()
            second = function.invoke(event)
            warm = time.perf_counter()
            function.close()
            samples.append(
                {
                    "interpreter_s": interpreter,
                    "import_s": max(ready - began - interpreter, 0.0),
                    "first_request_s": answered - ready,
                    "to_first_answer_s": answered - began,
                    "second_request_s": warm - answered,
                    "statuses": [first["statusCode"], second["statusCode"]],
                }
            )
    keys = ("interpreter_s", "import_s", "first_request_s", "to_first_answer_s", "second_request_s")
    return {
        "runs": runs,
        "deployed_paths": launcher.exact_paths,
        "statuses": samples[-1]["statuses"],
        **{k.replace("_s", "_ms"): round(1000 * median([s[k] for s in samples]), 1) for k in keys},
    }


def warm_cpu(requests: int) -> dict[str, Any]:
    from harness.fakes import FakePayloads, FakeQueue, FakeRegistry, FakeResults, version_record
    from switchyard.auth import KeyIdDirectory
    from switchyard.queues import ModelLanes
    from switchyard.schemas import ResultRecord
    from switchyard_router.app import RouterDeps, create_app
    from switchyard_router.logic import PredictService

    record = version_record(TEXT_MODEL)
    results = FakeResults()
    embedding = [round(((i * 7919) % 1000) / 1000 - 0.5, 7) for i in range(384)]
    stand_in_cpu = [0.0]
    realtime, batch = FakeQueue("realtime"), FakeQueue("batch")

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
            registry=FakeRegistry(record),
            results=results,
            payloads=FakePayloads(),
            routing=None,
            result_ttl_seconds=86_400,
            claim_check_bytes=200_000,
        )
    )
    deps = RouterDeps(
        **accepted_kwargs(
            RouterDeps,
            service=service,
            tenants=KeyIdDirectory({"acme": "bench-key-id"}),
            max_body_bytes=1_048_576,
        )
    )
    app = create_app(deps)
    texts = sentences()
    headers = {"x-api-key": "bench-key"}
    key_id = "bench-key-id"  # the id API Gateway would pass for that key
    path = f"/v1/models/{TEXT_MODEL}/predict"

    async def drive(target: Any, n: int) -> tuple[float, float]:
        for i in range(20):  # warm-up
            await call(target, "POST", path, headers, predict_body([texts[i]]), "", key_id)
        stand_in_cpu[0] = 0.0
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            body = predict_body([texts[i % 256]])
            status, _ = await call(target, "POST", path, headers, body, "", key_id)
            assert status == 200, status
        return time.process_time() - cpu, time.perf_counter() - wall

    with quiet_output():
        cpu, wall = asyncio.run(drive(app, requests))
        stand_in = stand_in_cpu[0]
        driver, _ = asyncio.run(drive(NoopApp(), requests))
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
