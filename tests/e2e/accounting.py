"""Requests sent to an e2e platform, and what became of them: every accepted request
gets exactly one result, counted in the workers' logs."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.e2e.test_api import DIGIT_ZERO

SENTENCES = [f"sentence number {i} about trains, yards and switches" for i in range(32)]


def submit_async(platform, count: int, sentences: int | None = None) -> list[str]:
    """``count`` async predicts of minilm-embed from 8 threads, of ``sentences``
    sentences each (4 to 11, in turn, if None); their request ids."""
    headers = {"x-api-key": platform.api_key}

    def one(i: int) -> str:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            response = client.post(
                "/v1/models/minilm-embed/predict?async=true",
                json={"inputs": SENTENCES[: sentences or 4 + i % 8]},
                headers=headers,
            )
            assert response.status_code == 202, response.text
            return response.json()["request_id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(count)))


def submit_pinned(platform, http: httpx.Client, version: str) -> dict:
    """An async predict of ``digits-cnn`` pinned to ``version`` (just registered: the
    router caches version records for a few seconds, so it is retried until taken);
    the 202's body."""
    headers = {"x-api-key": platform.api_key, "x-model-version": version}
    deadline = time.monotonic() + 30
    while True:
        response = http.post(
            "/v1/models/digits-cnn/predict?async=true",
            json={"inputs": [DIGIT_ZERO]},
            headers=headers,
        )
        if response.status_code == 202 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert response.status_code == 202, response.text
    return response.json()


def wait_all_done(platform, ids: list[str], timeout: float) -> dict[str, dict]:
    headers = {"x-api-key": platform.api_key}
    deadline = time.monotonic() + timeout
    done: dict[str, dict] = {}
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        while len(done) < len(ids):
            assert time.monotonic() < deadline, f"{len(ids) - len(done)} requests never finished"
            for rid in ids:
                if rid not in done:
                    body = client.get(f"/v1/requests/{rid}", headers=headers).json()
                    if body["status"] != "queued":
                        done[rid] = body
            time.sleep(0.2)
    return done


def stored_per_request(platform) -> Counter:
    return Counter(
        e["request_id"] for e in platform.worker_log_events() if e.get("message") == "result stored"
    )
