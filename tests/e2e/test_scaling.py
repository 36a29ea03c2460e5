"""Workers follow the queue: from zero to more than one and back to zero, with every
request held at zero and answered exactly once.

Its own platform (not the shared one, which keeps a warm worker per model): dev's
minimum of zero, a short idle time (``SWITCHYARD_IDLE_SECONDS``), and a small
backlog per worker with no cool-downs in its manifest, so that a modest burst
scales ``minilm-embed`` past one worker.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from harness.local_platform import set_everywhere
from harness.waiting import wait_for
from harness.worker_log import logged_at
from switchyard.manifest import load_manifest
from tests.e2e.accounting import SENTENCES, stored_per_request, submit_async, wait_all_done
from tests.e2e.conftest import Platform, e2e_manifest, start_platform

MODEL = "minilm-embed"
IDLE_SECONDS = 5
# A burst the router takes in well faster than one worker answers it, so that a
# backlog builds up whatever the machine's speed: 100 requests of 32 sentences (the
# router takes ~20 a second; one worker answers ~6 a second on two cores).
BURST = 100
BURST_SENTENCES = 32
# Per model and stage in the manifest; the same values for all in this test's copy.
SCALING = {
    "backlog_per_task": 25,
    "max_tasks": 2,
    "scale_out_cooldown_seconds": 0,
    "scale_in_cooldown_seconds": 0,
}


@pytest.fixture(scope="module")
def scaling_platform(tmp_path_factory):
    started = start_platform(
        tmp_path_factory.mktemp("scaling-platform"),
        set_everywhere(e2e_manifest(), SCALING),
        {"SWITCHYARD_MIN_WORKERS": "0", "SWITCHYARD_IDLE_SECONDS": str(IDLE_SECONDS)},
    )
    yield started
    started.stop()  # Ctrl-C: the workers drain


def workers(platform: Platform, model: str = MODEL) -> dict[str, int]:
    return platform.scaling()["models"][model]["workers"]


def autoscaler_records(platform: Platform, message: str) -> list[dict[str, Any]]:
    return [
        r
        for r in platform.log_events("autoscaler.log")
        if r.get("message") == message and r.get("model") == MODEL
    ]


class WorkerWatch:
    """The most workers (running + starting) ``scaling.json`` showed while it ran."""

    def __init__(self, platform: Platform) -> None:
        self.most = 0
        self._platform = platform
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> WorkerWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            w = workers(self._platform)
            self.most = max(self.most, w["running"] + w["starting"])
            time.sleep(0.1)


def test_from_zero_to_a_burst_and_back_every_request_answered_once(scaling_platform):
    platform = scaling_platform
    headers = {"x-api-key": platform.api_key}

    # GIVEN a platform at dev's minimum: no worker started, none wanted
    assert platform.at_zero(MODEL), workers(platform)
    assert list(platform.run_dir.glob(f"worker-{MODEL}-*.ready")) == []

    # WHEN a sync request arrives at zero
    sent_at = time.time()
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        response = client.post(
            f"/v1/models/{MODEL}/predict", json={"inputs": SENTENCES[:3]}, headers=headers
        )
        # THEN it is held, never refused: answered within its deadline, or 202 with
        # where to find the answer, which the first worker then gives
        assert response.status_code in (200, 202), response.text
        first = response.json()["request_id"]
        if response.status_code == 202:
            assert response.headers["Location"].endswith(f"/v1/requests/{first}")
    answer = wait_all_done(platform, [first], timeout=120)[first]
    assert answer["status"] == "done" and len(answer["outputs"]) == 3
    wakes = autoscaler_records(platform, "scaling decision")
    wake = next(r for r in wakes if r["action"] == "wake")
    assert wake["workers"] == 0 and wake["desired"] == 1
    # (a result is read a moment before its log line is written, never after its
    # message is deleted)
    platform.wait_until_idle(MODEL, timeout_s=30)
    stored = next(
        e
        for e in platform.worker_log_events()
        if e.get("message") == "result stored" and e.get("request_id") == first
    )
    # AND the worker that answered took over the platform's standby (imports done)
    starting = [e for e in platform.worker_log_events() if e.get("message") == "worker starting"]
    assert [e["standby"] for e in starting] == [True], starting
    print(
        f"\nfirst request at zero: HTTP {response.status_code}; decided after "
        f"{wake['at'] - sent_at:.2f} s, result stored after {logged_at(stored) - sent_at:.2f} s"
    )

    # WHEN the model has had no work for the idle time, THEN it is back at zero
    wait_for(
        lambda: platform.at_zero(MODEL),
        IDLE_SECONDS + 30,
        every_s=0.2,
        what="back to zero after the first request",
    )
    assert autoscaler_records(platform, "worker stopped"), "the worker was not stopped"

    # WHEN a burst of async requests arrives at zero
    with WorkerWatch(platform) as watch:
        began = time.monotonic()
        ids = submit_async(platform, BURST, BURST_SENTENCES)  # each answered 202 at once
        accepted_s = time.monotonic() - began
        results = wait_all_done(platform, ids, timeout=150)

    # THEN the model scaled past one worker and every request was answered exactly once
    assert watch.most >= 2, f"at most {watch.most} worker(s) for {BURST} requests"
    assert max(r["desired"] for r in autoscaler_records(platform, "scaling decision")) >= 2
    assert all(r["status"] == "done" for r in results.values())
    platform.wait_until_idle(MODEL, timeout_s=30)  # every answer logged
    stored_counts = stored_per_request(platform)
    assert {rid: stored_counts[rid] for rid in [first, *ids]} == {rid: 1 for rid in [first, *ids]}
    assert platform.queue_depth(MODEL, "realtime", dlq=True) == 0
    print(f"burst of {BURST}: accepted in {accepted_s:.1f} s; at most {watch.most} workers")

    # AND after the idle time it is back at zero, the workers drained and gone
    wait_for(
        lambda: platform.at_zero(MODEL),
        IDLE_SECONDS + 60,
        every_s=0.2,
        what="back to zero after the burst",
    )
    scale_ins = [
        r for r in autoscaler_records(platform, "scaling decision") if r["action"] == "scale_in"
    ]
    assert scale_ins[-1]["desired"] == 0 and scale_ins[-1]["workers"] >= 1
    assert list(platform.run_dir.glob(f"worker-{MODEL}-*.ready")) == []


def test_the_scaling_state_and_metrics_are_written(scaling_platform):
    # GIVEN a running platform, WHEN its scaling state file and log are read
    state = scaling_platform.scaling()
    emf = [
        json.loads(line)
        for line in (scaling_platform.run_dir / "logs" / "autoscaler.log").read_text().splitlines()
        if line.startswith('{"_aws"')
    ]

    # THEN every model has its workers, lanes and last decision with its reason
    assert set(state["models"]) == set(scaling_platform.info["queues"])
    for figures in state["models"].values():
        assert set(figures["workers"]) >= {"running", "starting", "desired"}
        assert set(figures["lanes"]) == {"realtime", "batch"}
        assert set(figures["lanes"]["realtime"]) == {"visible", "in_flight", "oldest_age_seconds"}
        assert figures["last_decision"]["reason"]
    # AND the worker counts go out as EMF metrics: per model with workers of its own,
    # per pool for the models that share a pool's
    manifest = load_manifest(scaling_platform.run_dir / "manifest.toml")
    own = {m for m, spec in manifest.models.items() if spec.pool is None}
    assert {d["model"] for d in emf if "model" in d} == own
    assert {d["pool"] for d in emf if "pool" in d} == set(manifest.pools)
    for dimension in ("model", "pool"):
        metrics = next(d for d in emf if dimension in d)["_aws"]["CloudWatchMetrics"][0]
        assert metrics["Dimensions"] == [[dimension]]
        assert {m["Name"] for m in metrics["Metrics"]} == {
            "DesiredWorkers",
            "RunningWorkers",
            "StartingWorkers",
        }


# CPU overflow (docs/scaling.md): the demo's GPU pool serves digits-cnn-onnx, which
# is cpu_capable, and overflows into the CPU pool that serves the small classifiers.
OVERFLOW_MODEL, CPU_MODEL = "digits-cnn-onnx", "iris-logreg"


def test_a_cpu_capable_model_at_zero_is_answered_by_the_cpu_pool_first(scaling_platform):
    platform = scaling_platform
    gpu_pool, cpu_pool = platform.service_of(OVERFLOW_MODEL), platform.service_of(CPU_MODEL)
    assert platform.info["pools"][cpu_pool]["overflow"] == [OVERFLOW_MODEL]
    headers = {"x-api-key": platform.api_key, "x-deadline-ms": "20000"}
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        # GIVEN the CPU pool awake (a request to one of its own models) and the GPU
        # pool at zero
        woken = client.post(
            f"/v1/models/{CPU_MODEL}/predict", json={"inputs": [[5.1, 3.5, 1.4, 0.2]]},
            headers=headers,
        )  # fmt: skip
        assert woken.status_code == 200, woken.text
        assert woken.json()["served_by"] == cpu_pool
        assert platform.at_zero(OVERFLOW_MODEL), workers(platform, OVERFLOW_MODEL)
        # WHEN a request to the GPU pool's cpu_capable model arrives
        response = client.post(
            f"/v1/models/{OVERFLOW_MODEL}/predict", json={"inputs": [[8.0] * 64]},
            headers=headers,
        )  # fmt: skip
    # THEN the CPU pool answers it, and says so
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["served_by"]) == ("done", cpu_pool)
    assert len(body["outputs"]) == 1
    # AND the GPU pool's first worker, if the request woke it before the CPU pool took
    # it, was ready only after the answer
    ready = [
        logged_at(e)
        for e in platform.log_events(f"worker-{gpu_pool}-*.log")
        if e.get("message") == "worker ready"
    ]
    stored = wait_for(
        lambda: next(
            (
                e
                for e in platform.worker_log_events()
                if e.get("message") == "result stored" and e["request_id"] == body["request_id"]
            ),
            None,
        ),
        30,
        what="the answer's log line",
    )
    assert stored["worker"] in {
        e.get("worker") for e in platform.log_events(f"worker-{cpu_pool}-*.log")
    }
    stored_at = logged_at(stored)
    assert all(at > stored_at for at in ready), (stored_at, ready)
    overflow = [
        e
        for e in platform.log_events(f"worker-{cpu_pool}-*.log")
        if e.get("message") == "overflow open" and e.get("model") == OVERFLOW_MODEL
    ]
    assert overflow and overflow[0]["running_workers"] == 0, overflow
    gpu_ready = f"ready {min(ready) - stored_at:+.1f} s after it" if ready else "never started"
    print(
        f"\n{OVERFLOW_MODEL} at zero: answered by {cpu_pool} in "
        f"{body['timings'].get('total_ms', 0):.0f} ms; {gpu_pool}'s first worker {gpu_ready}"
    )
