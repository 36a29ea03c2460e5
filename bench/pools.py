"""Pools: a long tail of models served by one pool, against one service per model.

Two fresh local platforms run the same models and the same workload, one after the
other (the *arms*), and are compared as ratios within the run:

- **pool**: every model names one pool (``harness.local_platform.pooled``), whose
  worker loads a version on first use and keeps what fits its budget, the least
  recently used evicted first;
- **dedicated**: the same models, each with a worker service of its own
  (``unpooled``).

The models (``MODELS``, in their Zipf rank, which is the manifest's order): the
sentence embedder ``minilm-embed``, four ONNX classifiers and three TorchScript
ones; three runtimes. Warm, as the pool's worker measures them, the embedder takes
~87 MiB, three of the classifiers are wide networks of ~50 to ~65 MiB and the other
four take 1 MiB or less: ~270 MiB in all. The budget (``BUDGET_MIB``) holds the
embedder beside one wide network and the small ones, so the wide ones evict each
other (and whatever was used less recently than the one in the way).

Scaling is the manifest's dev stage in both arms, the same policy for the pool
(scaled on the sum of its models' work) and for each service: minimum zero, and a
service that had work keeps its worker for ``idle_seconds`` (900 s), longer than
the run. Before the measured window a warm-up asks every model until it answers:
each service is woken from zero as the platform does it, the first from its
standby (an interpreter with every runtime's libraries imported, the platform's
default), and in the pool each model is loaded once. The window then compares warm
services: one pool worker against a worker per model.

The workload: ``RATE`` requests/s for ``SECONDS``, arrival times drawn in advance
(Poisson, ``loadgen.poisson_schedule``, fixed seed) and sent at their times
whatever the answers (``loadgen.run_step``: an open loop); each request's model is
drawn from a Zipf law of exponent ``ZIPF_S`` over ``MODELS`` (``plan``, fixed seed),
one input each, sync with a deadline of ``DEADLINE_MS``. Both arms get the same
requests in the same order at the same offsets.

Measured per arm:

- answers/s, and latency p50/p99 from each request's scheduled time;
- cold loads in the window, from ``switchyard status --json`` before and after it
  (the pool's ``loads`` and ``evictions``, each model's ``cold_loads``); a service
  loads its model before its worker is ready, so its cold load is a worker started
  in the window;
- the pool's hits and misses: a request is a miss when its version finished
  loading while it waited (a ``model cached`` line of the pool's worker between
  its send and its answer), else a hit; each load's time, from the same lines;
- worker-seconds: for every worker process, the seconds it ran within the window
  (``worker_intervals``: from the autoscaler's start of it to its ``stopped`` line
  or the autoscaler's note that it stopped, was killed or was replaced), summed;
  per 1,000 answers, the cost. The window runs from the first request sent to the
  last answer. A standby is no worker: it serves no model, and ECS keeps none.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import re
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, digit_images, percentile, ratio, sentences
from bench.loadgen import Sender, StepResult, run_step
from bench.platform_proc import SWITCHYARD_UP
from bench.proc_cpu import CpuMeter, cpu_seconds
from harness.local_platform import (
    LOCAL_CREDENTIALS,
    RunningPlatform,
    descendants,
    edit_manifest,
    pooled,
    set_everywhere,
    start,
)
from harness.waiting import wait_for
from harness.worker_log import logged_at
from switchyard.manifest import Manifest

POOL = "longtail"
# In Zipf rank order (the first is asked most): the manifest's order. The embedder,
# four ONNX classifiers and three TorchScript ones; three of the classifiers are
# wide networks (digits-mlp, wine-mlp, cancer-mlp), the other four small.
MODELS = (
    "minilm-embed",
    "digits-cnn",
    "iris-logreg",
    "wine-forest",
    "cancer-boost",
    "digits-mlp",
    "wine-mlp",
    "cancer-mlp",
)
# The pool's budget (MiB): it holds the embedder (~87 MiB) beside one wide network
# (~50 to ~65 MiB warm) and the small models, never a second wide one; and a wide
# network's first load in a worker, measured at up to ~115 MiB, is not refused.
BUDGET_MIB = 192
ZIPF_S = 1.0
RATE = 10.0
SECONDS = {"full": 120.0, "quick": 30.0}
SEED = 46
DEADLINE_MS = 10_000
WARM_UP_DEADLINE_MS = 28_000  # the longest a sync caller may wait: a wake from zero
WARM_UP_LIMIT_S = 240.0
# After the warm-up, the window waits (at most SETTLE_LIMIT_S) for the platform's
# processes to fall quiet: the standby started again after the last wake imports
# every runtime's libraries, seconds of both cores.
SETTLE_LIMIT_S = 90.0
QUIET_CORES = 0.35
# Eight routers of models with a service of their own reserve 8 x `predict` of each
# stage's concurrency: 66 each leaves Lambda's unreserved minimum in prod, and is
# still over a tier's cap of sync requests (64).
PREDICT_CONCURRENCY = 66
SERVICE_INSTANCE_TYPES = ("c7i.xlarge",)  # a CPU model's own service, as minilm-embed's
CACHED = "model cached"
ENDS = ("stopped", "worker stopped", "worker killed", "worker replaced")
_HEADER = re.compile(r"^\[([^\]]+)\]\s*$")


def zipf_weights(count: int, s: float = ZIPF_S) -> list[float]:
    """Each rank's share of the requests under a Zipf law of exponent ``s``."""
    raw = [1 / (rank**s) for rank in range(1, count + 1)]
    return [w / sum(raw) for w in raw]


def plan(count: int, seed: int = SEED) -> list[str]:
    """The workload's requests in order: each one's model, drawn by the Zipf weights."""
    return random.Random(seed).choices(MODELS, weights=zipf_weights(len(MODELS)), k=count)


def unpooled(text: str, models: Iterable[str]) -> str:
    """The manifest with ``models`` out of their pools, each with a service of its
    own (on ``SERVICE_INSTANCE_TYPES`` where it names no instance types), and the
    pools no model names any more left out."""
    models = set(models)
    spec = tomllib.loads(text)
    kept = {m.get("pool") for name, m in spec.get("models", {}).items() if name not in models}
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            section = header.group(1).strip()
        parts = section.split(".")
        if parts[0] == "pools" and len(parts) > 1 and parts[1] not in kept:
            continue
        model = parts[1] if parts[0] == "models" and len(parts) == 2 else None
        if model in models and not header and re.match(r"^(pool|cpu_capable)\s*=", line):
            continue
        out.append(line)
        if model in models and header and not spec["models"][model].get("instance_types"):
            out.append(f"instance_types = {json.dumps(list(SERVICE_INSTANCE_TYPES))}")
    edited = "\n".join(out) + "\n"
    tomllib.loads(edited)  # still a valid manifest file
    return edited


def arm_manifest(budget_mib: int | None) -> str:
    """The manifest of an arm: ``MODELS`` alone, the result cache off (the workload
    repeats inputs), in one pool of ``budget_mib`` or, with None, each with a service
    of its own."""
    project = (ROOT / "manifest.toml").read_text()
    missing = set(MODELS) - set(tomllib.loads(project)["models"])
    if missing:
        raise RuntimeError(f"manifest.toml has no {sorted(missing)}")
    text = unpooled(edit_manifest(project, keep_models=set(MODELS)), MODELS)
    text = set_everywhere(text, {"result_cache_seconds": 0, "predict": PREDICT_CONCURRENCY})
    if budget_mib is None:
        return text
    return pooled(text, POOL, MODELS, memory_budget_mib=budget_mib)


def inputs_for(manifest: Manifest, count: int = 64, seed: int = SEED) -> dict[str, list[Any]]:
    """Inputs each model's signature takes: sentences for a text model, tensors of
    its shape within its range otherwise (8x8 digits for a 64-wide one)."""
    out: dict[str, list[Any]] = {}
    for model in MODELS:
        signature = manifest.models[model].signature
        if signature.kind == "text":
            out[model] = sentences(count, seed)
            continue
        (width,) = signature.shape
        if width == 64:
            out[model] = digit_images(count, seed)
            continue
        low = signature.minimum if signature.minimum is not None else 0.0
        high = signature.maximum if signature.maximum is not None else low + 10.0
        rng = random.Random(seed)
        out[model] = [
            [round(rng.uniform(low, high), 3) for _ in range(width)] for _ in range(count)
        ]
    return out


def _headers(platform: RunningPlatform, deadline_ms: int) -> dict[str, str]:
    return {"x-api-key": platform.api_key, "x-deadline-ms": str(deadline_ms)}


def sender(
    platform: RunningPlatform, targets: Sequence[str], inputs: Mapping[str, list[Any]]
) -> Sender:
    """Request ``i`` of the plan; its body says what it asked, the version that
    answered, and when it left and came back (epoch seconds)."""

    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        model = targets[i]
        choices = inputs[model]
        sent = time.time()
        response = await client.post(
            f"/v1/models/{model}/predict",
            json={"inputs": [choices[i % len(choices)]]},
            headers=_headers(platform, DEADLINE_MS),
        )
        body = {"model": model, "sent": sent, "answered": time.time()}
        if response.status_code == 200:
            answer = response.json()
            body["version"] = answer.get("version")
            body["timings"] = answer.get("timings") or {}
        return response.status_code, body

    return send


# -- reading what the platform recorded ------------------------------------------


def when(event: Mapping[str, Any]) -> float:
    """A log line's time (epoch seconds): ``at``, Powertools' ``timestamp`` (the
    workers'), or an ISO 8601 ``timestamp`` (the autoscaler's)."""
    if "at" in event:
        return float(event["at"])
    try:
        return logged_at(dict(event))
    except ValueError:
        return dt.datetime.fromisoformat(str(event["timestamp"])).timestamp()


@dataclass(frozen=True)
class Interval:
    """One worker process's life: from its start to its end (None: still running)."""

    worker: str
    started: float
    ended: float | None


def worker_intervals(
    worker_logs: Mapping[str, list[dict[str, Any]]], autoscaler: Iterable[dict[str, Any]]
) -> list[Interval]:
    """Every worker process's life, from the platform's records. It begins when the
    autoscaler starts it (a ``scaling decision`` naming it among ``started``), or
    starts it again in place of one that died (``worker replaced``); where neither
    is found, at its ``worker starting`` line. It ends at its own ``stopped`` line or
    the autoscaler's note that it stopped, was killed or was replaced, whichever
    comes first; None while it runs."""
    begins: dict[str, list[float]] = {}
    ends: dict[str, list[float]] = {}
    for e in autoscaler:
        if e.get("message") == "scaling decision":
            for worker in e.get("started") or []:
                begins.setdefault(str(worker), []).append(when(e))
        elif e.get("message") in ENDS and e.get("worker"):
            ends.setdefault(str(e["worker"]), []).append(when(e))
            if e["message"] == "worker replaced":
                begins.setdefault(str(e["worker"]), []).append(when(e))
    out = []
    for worker in sorted(set(worker_logs) | set(begins)):
        events = worker_logs.get(worker, [])
        starts = sorted(begins.get(worker, [])) or sorted(
            when(e) for e in events if e.get("message") == "worker starting"
        )
        stops = sorted([when(e) for e in events if e.get("message") in ENDS] + ends.get(worker, []))
        for i, began in enumerate(starts):
            following = starts[i + 1] if i + 1 < len(starts) else None
            end = next(
                (t for t in stops if t > began and (following is None or t <= following)), None
            )
            out.append(Interval(worker, began, end))
    return out


def worker_seconds(intervals: Iterable[Interval], t0: float, t1: float) -> dict[str, float]:
    """Each worker's seconds within ``[t0, t1]`` (workers that did not run in it
    left out)."""
    out: dict[str, float] = {}
    for interval in intervals:
        end = t1 if interval.ended is None else min(interval.ended, t1)
        seconds = end - max(interval.started, t0)
        if seconds > 0:
            out[interval.worker] = out.get(interval.worker, 0.0) + seconds
    return out


def most_at_once(intervals: Iterable[Interval], t0: float, t1: float) -> int:
    """The most worker processes running at one time within ``[t0, t1]``."""
    edges = []
    for i in intervals:
        began, end = max(i.started, t0), t1 if i.ended is None else min(i.ended, t1)
        if end > began:
            edges += [(began, 1), (end, -1)]
    running = most = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        running += step
        most = max(most, running)
    return most


@dataclass(frozen=True)
class Answer:
    """One answered request: what it asked, the version that answered, when it left
    and came back (epoch seconds), and its latency from its scheduled time."""

    model: str
    version: str
    sent: float
    answered: float
    latency_ms: float
    timings: Mapping[str, float] = field(default_factory=dict)


def split_hits(
    answers: Iterable[Answer], loads: Iterable[dict[str, Any]]
) -> tuple[list[Answer], list[Answer]]:
    """Hits and misses: a miss waited for its version to load (a ``model cached``
    line of that version between its send and its answer)."""
    loaded: dict[tuple[str, str], list[float]] = {}
    for e in loads:
        loaded.setdefault((str(e["model"]), str(e["version"])), []).append(when(e))
    hits, misses = [], []
    for a in answers:
        waited = any(a.sent <= t <= a.answered for t in loaded.get((a.model, a.version), []))
        (misses if waited else hits).append(a)
    return hits, misses


def latency(values: Sequence[float]) -> dict[str, Any]:
    """Count, p50 and p99 (ms) of latencies."""
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 50), 1) if values else None,
        "p99_ms": round(percentile(values, 99), 1) if values else None,
    }


def seconds_spread(values: Sequence[float]) -> dict[str, Any]:
    """Count, p50 and p99 of durations in seconds."""
    return {
        "count": len(values),
        "p50_seconds": round(percentile(values, 50), 3) if values else None,
        "p99_seconds": round(percentile(values, 99), 3) if values else None,
    }


def answers_of(result: StepResult) -> list[Answer]:
    """The answered requests of a step, as ``sender`` recorded them."""
    return [
        Answer(o.body["model"], str(o.body.get("version")), o.body["sent"], o.body["answered"],
               o.latency_ms, o.body.get("timings") or {})
        for o in result.outcomes
        if o.kind == "ok" and o.latency_ms is not None and o.body
    ]  # fmt: skip


# The stages of an answer's path the platform times (``timings`` in the answer).
STAGES = ("enqueue_ms", "queue_wait_ms", "batch_wait_ms", "compute_ms", "pickup_ms")


def stage_medians(answers: Sequence[Answer]) -> dict[str, float | None]:
    """The median of each stage's time over ``answers`` (ms): where their time went."""
    out: dict[str, float | None] = {}
    for stage in STAGES:
        values = [float(a.timings[stage]) for a in answers if stage in a.timings]
        out[stage] = round(percentile(values, 50), 1) if values else None
    return out


def status_counts(status: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of ``switchyard status --json`` the section compares before and
    after the window: the pool's loads and evictions, each model's cold loads."""
    pool = (status.get("pools") or {}).get(POOL) or {}
    return {
        "loads": pool.get("loads"),
        "evictions": pool.get("evictions"),
        "cold_loads": {m: (status["models"].get(m) or {}).get("cold_loads") for m in MODELS},
    }


def counted_since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What the counts of ``status_counts`` grew by between two readings (None where
    there is no count: a model with a service of its own has no cold loads)."""

    def grew(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else b - a

    return {
        "loads": grew(before["loads"], after["loads"]),
        "evictions": grew(before["evictions"], after["evictions"]),
        "cold_loads": {
            m: grew(before["cold_loads"].get(m), after["cold_loads"].get(m))
            for m in after["cold_loads"]
        },
    }


def compare(pool: Mapping[str, Any], dedicated: Mapping[str, Any]) -> dict[str, Any]:
    """The pool against the services, as ratios (pool / dedicated)."""
    hits = pool.get("hits") or {}
    return {
        "worker_seconds_ratio": _rounded(
            ratio(pool["worker_seconds_per_1000_answers"],
                  dedicated["worker_seconds_per_1000_answers"])
        ),
        "p50_ratio": _rounded(ratio(pool["p50_ms"], dedicated["p50_ms"])),
        "p99_ratio": _rounded(ratio(pool["p99_ms"], dedicated["p99_ms"])),
        "hit_p50_ratio": _rounded(ratio(hits.get("p50_ms"), dedicated["p50_ms"])),
        "hit_p99_ratio": _rounded(ratio(hits.get("p99_ms"), dedicated["p99_ms"])),
        "answers_per_s_ratio": _rounded(ratio(pool["answers_per_s"], dedicated["answers_per_s"])),
    }  # fmt: skip


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# -- one arm ---------------------------------------------------------------------


@contextmanager
def platform_for(manifest_text: str) -> Iterator[RunningPlatform]:
    """A fresh local platform on ``manifest_text`` (the harness's, as every section
    starts it), at dev's minimum of zero with the platform's standby; stopped and
    its run folder removed on exit."""
    env = {
        "SWITCHYARD_MIN_WORKERS": "0",
        "SWITCHYARD_STANDBY_WORKERS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        **LOCAL_CREDENTIALS,
    }
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-", ignore_cleanup_errors=True) as d:
        platform = start(Path(d), manifest_text, env, SWITCHYARD_UP)
        try:
            yield platform
        finally:
            platform.stop()


async def _warm(platform: RunningPlatform, inputs: Mapping[str, list[Any]]) -> None:
    """Every model asked in turn until it answers 200 (a 202 while its service
    wakes). One at a time: a pool measures a version's footprint as it loads, and a
    first load beside other models' first batches would count their memory too."""
    deadline = time.monotonic() + WARM_UP_LIMIT_S
    async with httpx.AsyncClient(base_url=platform.url, timeout=60) as client:
        for model in MODELS:
            while True:
                response = await client.post(
                    f"/v1/models/{model}/predict",
                    json={"inputs": [inputs[model][0]]},
                    headers=_headers(platform, WARM_UP_DEADLINE_MS),
                )
                if response.status_code == 200:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"warm-up: {model} answered {response.status_code}")
                await asyncio.sleep(1)


def _status(platform: RunningPlatform) -> dict[str, Any]:
    shown = platform.cli("status", "--json")
    if shown.returncode != 0:
        raise RuntimeError(f"switchyard status --json: {shown.stderr[-500:]}")
    return dict(json.loads(shown.stdout))


def _workers_settled(platform: RunningPlatform) -> bool:
    services = platform.scaling()["services"].values()
    return all(s["workers"]["running"] >= 1 and s["workers"]["starting"] == 0 for s in services)


def platform_cores(platform: RunningPlatform, seconds: float = 2.0) -> float:
    """The platform's processes' CPU over ``seconds``, in cores."""

    def used() -> float:
        return sum(cpu_seconds(pid) for pid in descendants(platform.process.pid))

    before = used()
    time.sleep(seconds)
    return (used() - before) / seconds


def settle(platform: RunningPlatform) -> float:
    """Wait until the platform uses under ``QUIET_CORES`` (at most ``SETTLE_LIMIT_S``);
    the cores it used last."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    busy = platform_cores(platform)
    while busy >= QUIET_CORES and time.monotonic() < deadline:
        busy = platform_cores(platform)
    return busy


def run_arm(budget_mib: int | None, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """One arm: a pool of ``budget_mib``, or (None) a service per model."""
    pool = budget_mib is not None
    name = "pool" if pool else "dedicated"
    text = arm_manifest(budget_mib)
    manifest = Manifest.model_validate(tomllib.loads(text))
    inputs = inputs_for(manifest)
    seconds = SECONDS["quick" if quick else "full"]
    targets = plan(round(RATE * seconds))
    with platform_for(text) as platform:
        began = time.monotonic()
        asyncio.run(_warm(platform, inputs))
        wait_for(lambda: _workers_settled(platform), 120, every_s=0.5, what="workers settled")
        busy = settle(platform)
        log(
            f"    {name}: warm after {time.monotonic() - began:.0f} s (platform at "
            f"{busy:.2f} cores); {len(targets)} requests"
        )
        before = status_counts(_status(platform))
        meter = CpuMeter(platform.process.pid)
        meter.start()
        result = run_step(
            platform.url, sender(platform, targets, inputs), RATE, seconds, seed=SEED,
            timeout_s=DEADLINE_MS / 1000 + 5,
        )  # fmt: skip
        cpu, others = meter.stop()
        after = status_counts(_status(platform))
        worker_logs = {
            path.stem: platform.log_events(path.name)
            for path in sorted((platform.run_dir / "logs").glob("worker-*.log"))
            if path.stem != "worker-standby"
        }
        autoscaler = platform.log_events("autoscaler.log")
        services = dict(platform.info.get("services") or {})
        policies = (platform.info.get("scaling") or {}).get("policies") or {}
    return summarize(
        name, result, targets, worker_logs, autoscaler, counted_since(before, after),
        services=services, policies=policies, cpu=cpu, others_cpu=others,
    )  # fmt: skip


def summarize(
    name: str,
    result: StepResult,
    targets: Sequence[str],
    worker_logs: Mapping[str, list[dict[str, Any]]],
    autoscaler: Iterable[dict[str, Any]],
    counts: Mapping[str, Any],
    services: Mapping[str, Any] | None = None,
    policies: Mapping[str, Any] | None = None,
    cpu: Mapping[str, float] | None = None,
    others_cpu: float | None = None,
) -> dict[str, Any]:
    """An arm's figures from its requests' outcomes and the platform's records, and
    the CPU seconds its processes (``cpu``, by role) and the rest of the machine
    (``others_cpu``) spent in the window."""
    summary = result.summary()
    answers = answers_of(result)
    sent = [o.body["sent"] for o in result.outcomes if o.body]
    t0 = min(sent) if sent else 0.0
    t1 = max([o.body["answered"] for o in result.outcomes if o.body] or [t0])
    intervals = worker_intervals(worker_logs, autoscaler)
    by_worker = worker_seconds(intervals, t0, t1)
    total = sum(by_worker.values())
    events = [e for evs in worker_logs.values() for e in evs]
    loads = [e for e in events if e.get("message") == CACHED and t0 <= when(e) <= t1]
    hits, misses = split_hits(answers, loads)
    cached = sorted((e for e in events if e.get("message") == CACHED), key=when)
    per_model = {
        m: latency([a.latency_ms for a in answers if a.model == m])
        | {
            "requests": sum(1 for t in targets if t == m),
            # the footprints the pool's worker measured as it loaded the model: the
            # first (before the window, the warm-up's) and the last
            "footprints_mib": [e.get("footprint_mib") for e in cached if e["model"] == m][:1]
            + [e.get("footprint_mib") for e in cached if e["model"] == m][-1:],
        }
        for m in MODELS
    }
    starts_in_window = sorted(i.worker for i in intervals if t0 <= i.started <= t1)
    return {
        "arm": name,
        "services": {k: list(v) for k, v in (services or {}).items()},
        "policies": dict(policies or {}),
        "requests": summary["sent"],
        "ok": summary["ok"],
        "miss_202": summary["miss_202"],
        "errors": summary["errors"],
        "timeouts": summary["timeouts"],
        "answers_per_s": summary["throughput"],
        "p50_ms": summary["p50_ms"],
        "p95_ms": summary["p95_ms"],
        "p99_ms": summary["p99_ms"],
        "max_ms": summary["max_ms"],
        "send_lag_ms_p99": summary["send_lag_ms_p99"],
        "window_seconds": round(t1 - t0, 1),
        "worker_seconds": round(total, 1),
        "worker_seconds_by_worker": {k: round(v, 1) for k, v in sorted(by_worker.items())},
        "worker_seconds_per_1000_answers": round(1000 * total / summary["ok"], 1)
        if summary["ok"]
        else None,
        "most_workers_at_once": most_at_once(intervals, t0, t1),
        **cpu_figures(cpu or {}, others_cpu, summary["ok"], result.elapsed_s),
        "workers_started_in_window": starts_in_window,
        "per_model": per_model,
        "status_counts": dict(counts),
        "loads_in_window": len(loads),
        "load_seconds": seconds_spread([float(e["load_seconds"]) for e in loads]),
        "loads_by_entry": _count(f"{e['model']} {e['version']}" for e in loads),
        "hits": latency([a.latency_ms for a in hits]) | {"stages_ms": stage_medians(hits)},
        "misses": latency([a.latency_ms for a in misses]) | {"stages_ms": stage_medians(misses)},
    }


def cpu_figures(
    cpu: Mapping[str, float], others: float | None, answers: int, seconds: float
) -> dict[str, Any]:
    """CPU per answer: the workers' and the whole platform's (the load generator
    left out), and the share of the machine that other work took meanwhile (a
    shared machine's neighbours slow both arms' tails)."""
    platform = {k: v for k, v in cpu.items() if k != "load generator"}
    workers = sum(v for k, v in platform.items() if k.startswith("worker"))
    cores = os.cpu_count() or 1
    return {
        "cpu_seconds_by_role": {k: round(v, 2) for k, v in sorted(cpu.items())},
        "worker_cpu_ms_per_answer": round(1000 * workers / answers, 2) if answers else None,
        "platform_cpu_ms_per_answer": round(1000 * sum(platform.values()) / answers, 2)
        if answers
        else None,
        "others_busy_share": round(others / (seconds * cores), 3)
        if others is not None and seconds > 0
        else None,
    }


def _count(names: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    seconds = SECONDS["quick" if quick else "full"]
    log(
        f"  {len(MODELS)} models, Zipf s={ZIPF_S}, {RATE:g} req/s for {seconds:g} s: "
        f"one pool of {BUDGET_MIB} MiB, then a service per model"
    )
    arms = {}
    for budget_mib in (BUDGET_MIB, None):
        arm = run_arm(budget_mib, quick, log)
        arms[arm["arm"]] = arm
        log(
            f"    {arm['arm']}: {arm['ok']}/{arm['requests']} ok, {arm['answers_per_s']} "
            f"answers/s, p50 {arm['p50_ms']} ms, p99 {arm['p99_ms']} ms, "
            f"{arm['worker_seconds_per_1000_answers']} worker-s per 1,000 answers"
        )
    return section(arms["pool"], arms["dedicated"], seconds)


def section(pool: dict[str, Any], dedicated: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The section's figures: the workload, both arms and their ratios."""
    return {
        "models": list(MODELS),
        "zipf_s": ZIPF_S,
        "shares": [round(w, 3) for w in zipf_weights(len(MODELS))],
        "budget_mib": BUDGET_MIB,
        "policy": pool["policies"].get(POOL),
        "rate": RATE,
        "seconds": seconds,
        "deadline_ms": DEADLINE_MS,
        "seed": SEED,
        "cores": os.cpu_count(),
        "pool": pool,
        "dedicated": dedicated,
        "comparison": compare(pool, dedicated),
    }
