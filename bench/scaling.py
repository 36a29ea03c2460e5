"""Scaling from zero: how long the first request at zero waits, and how the workers
follow a burst there and back, live and replayed through the policy.

Each run is a fresh local platform with ``minilm-embed`` alone at dev's minimum of
zero workers, a short idle time (``IDLE_SECONDS``) and no cool-down between
scale-ins (``STAGE_SCALING``), so that the model goes back to zero within the run,
and again after the next request.

- **First request at zero.** One sync predict (one sentence) is sent while the model
  has no worker; the answer's time is split with the platform's own stamps: the
  autoscaler's ``wake`` decision (*decision*), the worker's ``worker starting`` line
  (*process start*: a new interpreter and the worker's imports, or a standby taking
  its order), its ``worker ready`` line (*model load*: the runtime's libraries, the
  artifact's check, the weights), and the answer reaching the caller (*first batch*:
  the receive, the batch, the result write and the router's pick-up). Repeated
  with the platform's standby (the default) and without (``--standby-workers 0``).
- **A burst from zero.** ``BURST`` async one-sentence predicts sent at once to the
  model at zero. The supervisor's ``scaling.json`` is sampled throughout: workers
  (running, starting, desired), queue depth and the age of the oldest message, until
  every request is answered and the model is back at zero.
- **Replay.** The same arrivals, second by second, go through
  ``switchyard.scaling.decide`` in the harness's simulator
  (``harness.scaling_scenarios.Simulator``) with the start times and the per-worker
  rate measured in the live run: what the policy alone would have done, plotted
  beside what the platform did.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench.backlog import adapters_of, drain, submit
from bench.common import TEXT_MODEL, median, sentences
from bench.platform_proc import local_platform
from harness.local_platform import RunningPlatform
from harness.scaling_scenarios import Simulator
from harness.waiting import wait_for
from harness.worker_log import logged_at
from switchyard.scaling import ScalingPolicy
from switchyard_local.autoscaler import TICK_SECONDS

IDLE_SECONDS = 10
# Scale-ins are at least 300 s apart in the manifest: without this, the model would
# stay at one worker for five minutes between two runs at zero.
STAGE_SCALING = {"scale_in_cooldown_seconds": 0}
BURST = {"full": 2000, "quick": 300}
ZERO_REPEATS = {"full": {"standby": 3, "cold": 2}, "quick": {"standby": 1, "cold": 1}}
SAMPLE_SECONDS = 0.5
DEADLINE_MS = 28_000  # the longest a sync caller may wait


@contextmanager
def platform_at_zero(standby_workers: int) -> Iterator[RunningPlatform]:
    saved = {k: os.environ.get(k) for k in ("SWITCHYARD_MIN_WORKERS", "SWITCHYARD_IDLE_SECONDS")}
    saved["SWITCHYARD_STANDBY_WORKERS"] = os.environ.get("SWITCHYARD_STANDBY_WORKERS")
    os.environ.update(
        SWITCHYARD_MIN_WORKERS="0",
        SWITCHYARD_IDLE_SECONDS=str(IDLE_SECONDS),
        SWITCHYARD_STANDBY_WORKERS=str(standby_workers),
    )
    try:
        with local_platform(keep_models={TEXT_MODEL}, stage_scaling=STAGE_SCALING) as platform:
            yield platform
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def state(platform: RunningPlatform) -> dict[str, Any]:
    return platform.scaling()["models"][TEXT_MODEL]


def first_request(platform: RunningPlatform, text: str) -> dict[str, Any]:
    """One sync predict at zero, its answer's time split into phases (seconds)."""
    wakes_before = len(_wakes(platform))
    starts_before = {e["at"] for e in platform.log_events("worker-*.log") if _is(e, "starting")}
    sent = time.time()
    response = httpx.post(
        f"{platform.url}/v1/models/{TEXT_MODEL}/predict",
        json={"inputs": [text]},
        headers={"x-api-key": platform.api_key, "x-deadline-ms": str(DEADLINE_MS)},
        timeout=60,
    )
    answered = time.time()
    if response.status_code != 200:
        raise RuntimeError(f"the first request at zero: {response.status_code} {response.text}")
    wake = _wakes(platform)[wakes_before]
    events = platform.log_events(f"worker-{TEXT_MODEL}-*.log")
    starting = next(e for e in events if _is(e, "starting") and e["at"] not in starts_before)
    after = [
        e for e in events if ("at" in e or "timestamp" in e) and logged_at(e) >= starting["at"]
    ]
    loaded = next(e for e in after if e.get("message") == "model loaded")
    ready = next(e for e in after if e.get("message") == "worker ready")
    phases = {
        "decision": wake["at"] - sent,
        "process_start": starting["at"] - wake["at"],
        "model_load": ready["at"] - starting["at"],
        "first_batch": answered - ready["at"],
    }
    return {
        "total_seconds": round(answered - sent, 3),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "from_standby": bool(starting.get("standby")),
        "model_load_parts": {k: loaded.get(f"{k}_seconds") for k in ("artifact", "import", "load")},
    }


def _is(event: dict[str, Any], what: str) -> bool:
    return event.get("message") == f"worker {what}"


def _wakes(platform: RunningPlatform) -> list[dict[str, Any]]:
    return [
        e
        for e in platform.log_events("autoscaler.log")
        if e.get("message") == "scaling decision"
        and e.get("model") == TEXT_MODEL
        and e.get("action") == "wake"
    ]


def from_zero(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    repeats = ZERO_REPEATS["quick" if quick else "full"]
    texts = sentences()
    jitter = random.Random(7)
    out: dict[str, Any] = {}
    for mode, standby in (("standby", 1), ("cold", 0)):
        runs = []
        with platform_at_zero(standby) as platform:
            for i in range(repeats[mode]):
                wait_for(
                    lambda p=platform: p.at_zero(TEXT_MODEL),
                    IDLE_SECONDS + 120,
                    every_s=0.2,
                    what="back at zero",
                )
                # The standby, if any, has finished its imports: the first is started
                # with the platform, the next ones once the last worker was loaded. A
                # random part of a tick more, so that the request does not arrive in
                # step with the autoscaler's ticks (at_zero reads the file each writes).
                time.sleep((10 if i == 0 else 3) + jitter.uniform(0, TICK_SECONDS))
                runs.append(first_request(platform, texts[i % len(texts)]))
                log(f"    first request at zero ({mode}): {runs[-1]}")
        out[mode] = {
            "runs": runs,
            "median_total_seconds": median([r["total_seconds"] for r in runs]),
            "median_phases": {
                k: round(median([r["phases"][k] for r in runs]), 3) for k in runs[0]["phases"]
            },
        }
    return out


class Sampler:
    """``scaling.json`` every ``SAMPLE_SECONDS`` on a thread: the live timeline."""

    def __init__(self, platform: RunningPlatform) -> None:
        self.points: list[dict[str, Any]] = []
        self._platform = platform
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scaling-sampler", daemon=True)
        self.t0 = time.time()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                figures = state(self._platform)
            except (OSError, ValueError, KeyError):
                figures = None  # replaced between reads
            if figures:
                lanes = figures["lanes"].values()
                w = figures["workers"]
                self.points.append(
                    {
                        "t": round(time.time() - self.t0, 2),
                        "running": w["running"],
                        "starting": w["starting"],
                        "desired": w["desired"],
                        "visible": sum(lane["visible"] for lane in lanes),
                        "in_flight": sum(lane["in_flight"] for lane in lanes),
                        "oldest_age_seconds": max(lane["oldest_age_seconds"] for lane in lanes),
                    }
                )
            self._stop.wait(SAMPLE_SECONDS)


def burst(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    requests = BURST["quick" if quick else "full"]
    texts = sentences()
    bodies = [[texts[i % len(texts)]] for i in range(requests)]
    with platform_at_zero(1) as platform:
        wait_for(
            lambda: platform.at_zero(TEXT_MODEL), 60, every_s=0.2, what="at zero before the burst"
        )
        time.sleep(5)  # the standby's imports
        policy = ScalingPolicy(**platform.info["scaling"]["policies"][TEXT_MODEL])
        with Sampler(platform) as sampler:
            ids, failures, started = asyncio.run(submit(platform, bodies))
            submitted = time.time()
            adapters = adapters_of(platform)
            drain(adapters, limit_s=900)
            tenant = platform.info["default_tenant"]
            records = [adapters.results.get(tenant, request_id) for request_id in ids]
            done = [r for r in records if r is not None and r.status == "done"]
            finished = max((r.completed_at or 0.0) for r in done) if done else time.time()
            wait_for(
                lambda: platform.at_zero(TEXT_MODEL),
                IDLE_SECONDS + 300,
                every_s=0.2,
                what="back at zero",
            )
            back_at_zero = time.time()
            time.sleep(2)
        starts = [
            (e["at"], e)
            for e in platform.log_events(f"worker-{TEXT_MODEL}-*.log")
            if _is(e, "starting")
        ]
        readies = [e for e in platform.log_events(f"worker-{TEXT_MODEL}-*.log") if _is(e, "ready")]
    t0 = sampler.t0
    live = sampler.points
    most = max((p["running"] for p in live), default=0)
    ready_after = sorted(logged_at(e) - started for e in readies)
    # Scaled in: nothing wanted, running or starting (drained workers may still be
    # finishing their last long poll before they exit).
    scaled_in = next(
        (
            p["t"] + t0 - started
            for p in live
            if p["t"] + t0 > finished and p["desired"] == p["running"] == p["starting"] == 0
        ),
        None,
    )
    seconds = finished - started
    # Worker-seconds of running workers while there was work: the per-worker rate the
    # replay gives its simulated workers.
    worker_seconds = sum(
        a["running"] * (b["t"] - a["t"])
        for a, b in itertools.pairwise(live)
        if started - t0 <= a["t"] < finished - t0
    )
    result = {
        "requests": requests,
        "accepted": len(ids),
        "submissions_failed": len(failures),
        "done": len(done),
        "not_done": len(records) - len(done),
        "submit_seconds": round(submitted - started, 2),
        "drain_seconds": round(seconds, 2),
        "inputs_per_s": round(len(done) / seconds, 1) if seconds > 0 else None,
        "most_workers_running": most,
        "inputs_per_worker_second": round(len(done) / worker_seconds, 1)
        if worker_seconds
        else None,
        "workers_started": len(starts),
        "workers_from_standby": sum(1 for _, e in starts if e.get("standby")),
        "workers_ready_after_seconds": [round(v, 2) for v in ready_after],
        "scaled_in_after_seconds": round(scaled_in, 1) if scaled_in is not None else None,
        "back_at_zero_after_seconds": round(back_at_zero - started, 1),
        "idle_seconds": IDLE_SECONDS,
        "policy": vars(policy),
        "started_at_offset": round(started - t0, 2),
        "live": live,
    }
    result["replay"] = replay(result, policy)
    log(
        f"    burst of {requests}: {len(done)} done in {seconds:.1f} s, at most {most} workers, "
        f"back at zero after {result['back_at_zero_after_seconds']} s"
    )
    return result


def replay(live: dict[str, Any], policy: ScalingPolicy) -> dict[str, Any]:
    """The burst's arrivals through the policy in the simulator, one tick a second,
    with the live run's start times and per-worker rate."""
    ready = live["workers_ready_after_seconds"]
    standby_start = ready[0] if ready else 2.0
    cold_start = median(ready[1:]) if len(ready) > 1 else standby_start * 3
    per_worker = live["inputs_per_worker_second"] or 1.0
    arrivals_per_s = live["accepted"] / max(live["submit_seconds"], 1.0)
    ticks = math.ceil(live["back_at_zero_after_seconds"] + 10)
    arrivals = [0] * ticks
    left = live["accepted"]
    for tick in range(ticks):
        take = min(left, math.ceil(arrivals_per_s))
        arrivals[tick] = take
        left -= take
    sim = Simulator(
        policy,
        tick_seconds=1.0,
        start_ticks=max(1, round(cold_start)),
        standby_ticks=max(1, round(standby_start)),
        per_worker=per_worker,
    ).run(arrivals)
    last_arrival = max(t for t, n in enumerate(arrivals) if n) if any(arrivals) else 0
    done_at = next(
        (
            p["t"]
            for p in sim.timeline
            if p["t"] > last_arrival and p["visible"] == p["in_flight"] == 0
        ),
        None,
    )
    back = [
        p["t"]
        for p in sim.timeline
        if done_at is not None and p["t"] > done_at and p["running"] + p["starting"] == 0
    ]
    return {
        "standby_start_seconds": round(standby_start, 2),
        "cold_start_seconds": round(cold_start, 2),
        "cold_start_measured": len(ready) > 1,
        "per_worker_inputs_per_s": round(per_worker, 1),
        "arrivals_per_s": round(arrivals_per_s, 1),
        "most_workers": max(p["running"] for p in sim.timeline),
        "drained_after_seconds": done_at,
        "changes": sim.changes,
        "back_at_zero_after_seconds": back[0] if back else None,
        "timeline": sim.timeline,
    }


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    log("  the first request at zero, with the standby and without")
    zero = from_zero(quick, log)
    log(f"  a burst of {BURST['quick' if quick else 'full']} async predicts from zero")
    return {"first_request_at_zero": zero, "burst": burst(quick, log)}
