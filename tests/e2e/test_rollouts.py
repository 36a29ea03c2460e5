"""Safe rollouts on the running platform, driven through the operator CLI."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from harness.local_platform import cmdline, descendants
from harness.waiting import wait_for
from switchyard.manifest import load_manifest
from switchyard_local.controller import MetricsWindow
from tests.e2e.test_api import DIGIT_ZERO, PATIENT_MS

ROUTING_PICKUP_S = 6  # the router caches a routing document for 5 s
FAULTY = Path(__file__).resolve().parents[2] / "build/models/digits-cnn/faulty/model.pt"
STABLE = FAULTY.parents[1] / "v1" / "model.pt"
# Callers whose versions are counted: a 10 % share is then held to 10 ± 4.9 %.
SPLIT_USERS = 600
SATURATING_CALLERS = 64  # enough to put digits-cnn's p99 over its 500 ms SLO here (650-770 ms)


def cli(platform, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = platform.cli(*args)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def set_traffic(platform, *args: str) -> None:
    cli(platform, "traffic", "set", "digits-cnn", *args)
    time.sleep(ROUTING_PICKUP_S)


def versions_for(platform, users: list[str], is_async: bool = True) -> dict[str, str]:
    def one(user: str) -> tuple[str, str]:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            response = client.post(
                "/v1/models/digits-cnn/predict" + ("?async=true" if is_async else ""),
                json={"inputs": [DIGIT_ZERO]},
                headers={"x-api-key": platform.api_key, "x-user-id": user},
            )
            assert response.status_code in (200, 202), response.text
            return user, response.json()["version"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        assigned = dict(pool.map(one, users))
    platform.wait_until_idle("digits-cnn")
    return assigned


def test_a_90_10_split_is_within_bounds_sticky_and_grows_without_moving_keys_out(platform):
    set_traffic(platform, "v1=90", "v2=10")
    users = [f"user-{i}" for i in range(SPLIT_USERS)]
    first = versions_for(platform, users)
    share = sum(v == "v2" for v in first.values()) / len(users)
    spread = 4 * math.sqrt(0.1 * 0.9 / len(users))  # 4 standard deviations around 10 %
    assert 0.1 - spread <= share <= 0.1 + spread

    sample = users[:200]
    assert versions_for(platform, sample) == {u: first[u] for u in sample}

    set_traffic(platform, "v1=80", "v2=20")
    grown = versions_for(platform, sample)
    moved_out = [u for u in sample if first[u] == "v2" and grown[u] != "v2"]
    moved_in = [u for u in sample if first[u] == "v1" and grown[u] == "v2"]
    assert moved_out == [] and moved_in


def test_assignment_survives_a_router_restart(platform):
    set_traffic(platform, "v1=50", "v2=50")
    users = [f"sticky-{i}" for i in range(200)]
    before = versions_for(platform, users)
    routers = [p for p in descendants(platform.process.pid) if _is_router(p)]
    assert len(routers) == 1
    os.kill(routers[0], signal.SIGTERM)

    def restarted() -> bool:
        alive = [p for p in descendants(platform.process.pid) if _is_router(p)]
        if not alive or alive == routers:
            return False
        try:
            return httpx.get(f"{platform.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(restarted, timeout_s=60, every_s=0.2, what="the router was not restarted")
    assert versions_for(platform, users) == before


def _is_router(pid: int) -> bool:
    return b"uvicorn" in cmdline(pid)


def test_shadow_never_changes_responses_and_is_reported(platform, http):
    set_traffic(platform, "v1=100", "v2=0", "--shadow", "v2:100")
    headers = {"x-api-key": platform.api_key, "x-deadline-ms": PATIENT_MS}
    images = [DIGIT_ZERO, [16 - x for x in DIGIT_ZERO], [min(16, x + 3) for x in DIGIT_ZERO]]
    answers = [
        http.post("/v1/models/digits-cnn/predict", json={"inputs": [img]}, headers=headers)
        for img in images * 10
    ]
    assert [(a.status_code, a.text) for a in answers if a.status_code != 200] == []
    shadowed = [a.json() for a in answers]
    assert {r["version"] for r in shadowed} == {"v1"}
    assert all(r["fallback"] is False for r in shadowed)

    set_traffic(platform, "v1=100", "v2=0")
    plain = [
        http.post("/v1/models/digits-cnn/predict", json={"inputs": [img]}, headers=headers).json()
        for img in images
    ]
    assert [r["outputs"] for r in plain] == [r["outputs"] for r in shadowed[:3]]

    deadline = time.monotonic() + 60
    while True:
        report = cli(platform, "shadow", "report", "digits-cnn").stdout
        rows = [line.split() for line in report.splitlines() if line.startswith("v2 ")]
        if rows and int(rows[0][2]) >= 30 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows, report
    shadow, primary, pairs, agreement = rows[0][:4]
    assert (shadow, primary, int(pairs)) == ("v2", "v1", 30)
    assert 0.0 <= float(agreement) <= 1.0 and float(agreement) > 0.5  # both are good models


def test_bad_operator_input_is_refused_and_changes_nothing(platform):
    before = cli(platform, "traffic", "show", "digits-cnn").stdout.splitlines()[0]
    for args, message in [
        (["v1=90", "v2=20"], "sum to 110"),
        (["v1=90", "v9=10"], "unknown version 'v9'"),
        (["v1=100", "--fallback", "v7"], "unknown version 'v7'"),
    ]:
        result = cli(platform, "traffic", "set", "digits-cnn", *args, ok=False)
        assert result.returncode == 2 and message in result.stderr
    assert cli(platform, "traffic", "show", "digits-cnn").stdout.splitlines()[0] == before
    again = cli(
        platform, "models", "register", "digits-cnn", "v1", "--artifact", str(FAULTY), ok=False
    )
    assert again.returncode == 2 and "immutable" in again.stderr


def test_a_faulty_canary_rolls_itself_back_and_callers_see_no_errors(platform):
    cli(platform, "models", "register", "digits-cnn", "v3", "--artifact", str(FAULTY))
    set_traffic(platform, "v1=90", "v3=10", "--fallback", "v1")
    headers = {"x-api-key": platform.api_key, "x-deadline-ms": PATIENT_MS}
    statuses: list[int] = []
    fallbacks = 0

    def one(i: int) -> tuple[int, bool]:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            r = client.post(
                "/v1/models/digits-cnn/predict",
                json={"inputs": [DIGIT_ZERO]},
                headers={**headers, "x-user-id": f"drill-{i}"},
            )
            return r.status_code, r.status_code == 200 and r.json()["fallback"]

    deadline = time.monotonic() + 120
    rolled_back = False
    batch = 0
    with ThreadPoolExecutor(max_workers=6) as pool:
        while not rolled_back:
            assert time.monotonic() < deadline, "the faulty canary was not rolled back"
            for status, fell_back in pool.map(one, range(batch * 60, (batch + 1) * 60)):
                statuses.append(status)
                fallbacks += fell_back
            batch += 1
            rolled_back = "ROLLBACK digits-cnn" in "\n".join(platform.output)
    show = cli(platform, "traffic", "show", "digits-cnn").stdout
    assert "v1=100 v3=0" in show.splitlines()[0]
    assert "by rollback-controller" in show and "v3: error rate" in show
    assert "stable's" in show  # judged against v1 over the same window
    errors = sum(s != 200 for s in statuses)
    assert errors <= 0.10 * len(statuses)  # no more than the canary's share
    assert fallbacks > 0  # the canary was hit, and its callers were answered by v1

    time.sleep(ROUTING_PICKUP_S)
    after = versions_for(platform, [f"drill-{i}" for i in range(200)], is_async=False)
    assert set(after.values()) == {"v1"}


def test_an_identical_canary_stays_when_the_whole_model_is_saturated(platform):
    # GIVEN v1's own artifact registered again as v4, and canaried at 10 %
    rollout = load_manifest(platform.run_dir / "manifest.toml").rollout
    cli(platform, "models", "register", "digits-cnn", "v4", "--artifact", str(STABLE))
    set_traffic(platform, "v1=90", "v4=10")
    document = cli(platform, "traffic", "show", "digits-cnn").stdout.splitlines()[0]
    assert "v1=90 v4=10" in document
    seen = len(platform.output)
    window = MetricsWindow(platform.run_dir / "logs" / "router.log", rollout.window_seconds)
    headers = {"x-api-key": platform.api_key, "x-deadline-ms": PATIENT_MS}
    stop = threading.Event()

    def caller(n: int) -> None:
        i = 0
        with httpx.Client(base_url=platform.url, timeout=60) as client:
            while not stop.is_set():
                r = client.post(
                    "/v1/models/digits-cnn/predict",
                    json={"inputs": [DIGIT_ZERO]},
                    headers={**headers, "x-user-id": f"crowd-{n}-{i}"},
                )
                assert r.status_code in (200, 202), r.text
                i += 1

    # WHEN more callers than the model can serve within its SLO keep it saturated
    # for a whole rollout window with enough requests for both versions in it
    began = time.time()
    deadline = time.monotonic() + 4 * rollout.window_seconds
    with ThreadPoolExecutor(max_workers=SATURATING_CALLERS) as pool:
        callers = [pool.submit(caller, n) for n in range(SATURATING_CALLERS)]
        while True:
            time.sleep(2)
            window.poll()
            now = time.time()
            stats = window.stats("digits-cnn", since=now - rollout.window_seconds)
            counts = {v: stats[v].requests if v in stats else 0 for v in ("v1", "v4")}
            full = now - began >= rollout.window_seconds
            if full and min(counts.values()) >= rollout.min_requests:
                break
            if any(c.done() for c in callers) or time.monotonic() > deadline:
                break
        stop.set()
    for c in callers:
        c.result()  # a caller's failed request fails the test
    time.sleep(2)  # the controller judges once a second

    # THEN the canary keeps its share: the model was slow, not the canary
    rollbacks = [line for line in platform.output[seen:] if line.startswith("ROLLBACK digits-cnn")]
    p99s = {v: s.p99_ms for v, s in stats.items()}
    assert rollbacks == [], f"p99 ms in the last window: {p99s}"
    assert cli(platform, "traffic", "show", "digits-cnn").stdout.splitlines()[0] == document
    assert min(counts.values()) >= rollout.min_requests, counts  # and it was judged
    set_traffic(platform, "v1=100")
    platform.wait_until_idle("digits-cnn")


def test_the_fallback_answers_when_the_chosen_version_fails(platform, http):
    set_traffic(platform, "v1=0", "v3=100", "--fallback", "v1")
    response = http.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [DIGIT_ZERO]},
        headers={"x-api-key": platform.api_key, "x-deadline-ms": PATIENT_MS},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["fallback"] is True and body["version"] == "v1"
    assert body["outputs"][0]["class"] == 0
    set_traffic(platform, "v1=100")


def test_batch_jobs_run_on_the_stable_version_not_on_a_canary(platform, http):
    # GIVEN v2, registered after v1, held at 0 % beside it
    set_traffic(platform, "v1=100", "v2=0")
    headers = {"x-api-key": platform.api_key}

    def submitted(inputs: list) -> dict:
        response = http.post(
            "/v1/jobs", json={"model": "digits-cnn", "inputs": inputs}, headers=headers
        )
        assert response.status_code == 202, response.text
        return response.json()

    def ended(job_id: str) -> dict:
        def done() -> dict | None:
            job = http.get(f"/v1/jobs/{job_id}", headers=headers).json()
            return job if job["status"] in ("succeeded", "failed") else None

        return wait_for(done)

    # WHEN a job is submitted, and a file is dropped in the bucket
    job = submitted([DIGIT_ZERO] * 3)
    bucket = platform.info["names"]["batch_drop_bucket"]
    key = "acme/digits-cnn/stable-version.jsonl"
    body = "\n".join(json.dumps(DIGIT_ZERO) for _ in range(4)).encode()
    platform.client("s3").put_object(Bucket=bucket, Key=key, Body=body)

    def dropped() -> dict | None:
        jobs = http.get("/v1/jobs", params={"limit": 100}, headers=headers).json()["jobs"]
        return next((j for j in jobs if j["source"] == f"s3://{bucket}/{key}"), None)

    # THEN both run on v1, which takes the traffic, not on the newer v2
    assert job["version"] == wait_for(dropped)["version"] == "v1"
    assert ended(job["job_id"])["status"] == "succeeded"
    assert ended(wait_for(dropped)["job_id"])["status"] == "succeeded"
    # and once v2 takes the larger share, the next job runs on it
    set_traffic(platform, "v1=10", "v2=90")
    promoted = submitted([DIGIT_ZERO] * 2)
    assert promoted["version"] == "v2"
    assert ended(promoted["job_id"])["status"] == "succeeded"
    set_traffic(platform, "v1=100")
