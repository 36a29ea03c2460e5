"""One tenant holding its maximum streams, or its maximum of work queued on a model,
cannot starve another tenant: the routers count each tenant's streams and queued
requests across processes (switchyard.admission, in the results table), refuse the
next one with 429 and Retry-After, and answer other tenants."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest

from harness.local_platform import set_everywhere
from harness.waiting import wait_for
from tests.e2e.conftest import GENERATION_MODEL, e2e_manifest, slow_version, start_platform

MAX_STREAMS = 2
MAX_QUEUED = 2
IMAGE = [0, 0, 5, 13, 9, 1, 0, 0] * 8
LONG_STREAM = {"prompt": "Return the", "max_tokens": 256, "temperature": 0.8, "stream": True}


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """A platform whose tiers allow each tenant two streams at once, and two
    requests queued (or running) per model."""
    text = set_everywhere(e2e_manifest(), {"max_streams": MAX_STREAMS, "max_queued": MAX_QUEUED})
    platform = start_platform(
        tmp_path_factory.mktemp("capped"), text, {"SWITCHYARD_MIN_WORKERS": "1"}
    )
    yield platform
    platform.stop()


def test_a_tenant_at_its_stream_cap_cannot_stop_another_tenants_predict(capped):
    keys = capped.keys
    acme = {"x-api-key": keys["acme"]}
    with (
        contextlib.ExitStack() as held,
        httpx.Client(base_url=capped.url, timeout=60) as http,
        slow_version(capped, "slow", step_delay_seconds=1.0),
    ):
        # GIVEN acme holding its two streams, each past its first token (a version
        # slow enough that they run on through the test: a second a decode step)
        slow = {**acme, "x-model-version": "slow"}
        reading: list = []  # each stream's line iterator, kept: a dropped one closes it
        for _ in range(MAX_STREAMS):
            response = held.enter_context(
                http.stream("POST", "/v1/models/pydoc-gpt/generate", json=LONG_STREAM, headers=slow)
            )
            assert response.status_code == 200
            reading.append(response.iter_lines())
            first = next(line for line in reading[-1] if line.startswith("data:"))
            assert "token" in json.loads(first.removeprefix("data:"))
        # WHEN acme asks for one more stream
        refused = http.post("/v1/models/pydoc-gpt/generate", json=LONG_STREAM, headers=acme)
        # THEN it is refused: 429, Retry-After, the platform's error shape
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["code"] == "too_many_streams"
        # AND globex's sync predicts are answered meanwhile
        for _ in range(3):
            answer = http.post(
                "/v1/models/digits-cnn/predict",
                json={"inputs": [IMAGE]},
                headers={"x-api-key": keys["globex"], "x-deadline-ms": "20000"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "done"
    # AND once acme's streams are closed its next stream is admitted again (as soon
    # as the router finds each caller gone: at its next token, a second or so)
    with httpx.Client(base_url=capped.url, timeout=60) as http:

        def admitted() -> httpx.Response | None:
            again = http.post(
                "/v1/models/pydoc-gpt/generate",
                json={**LONG_STREAM, "max_tokens": 4},
                headers=acme,
            )
            return None if again.status_code == 429 else again

        again = wait_for(admitted, timeout_s=30)
        assert again.status_code == 200, again.text


def queued_on(platform, tenant: str, model: str) -> int:
    """What the routers count of ``tenant``'s requests queued on ``model``."""
    item = platform.client("dynamodb").get_item(
        TableName=platform.info["settings"]["results_table"],
        Key={"tenant": {"S": tenant}, "request_id": {"S": f"admission#queued#{model}"}},
        ConsistentRead=True,
    )
    return int(item.get("Item", {}).get("held", {}).get("N", "0"))


def test_over_its_queued_cap_a_tenant_is_refused_queue_full_and_another_is_answered(capped):
    keys = capped.keys
    acme = {"x-api-key": keys["acme"]}
    slow_body = {"prompt": "Return the", "max_tokens": 3}
    with (
        httpx.Client(base_url=capped.url, timeout=60) as http,
        slow_version(capped, "slow-queued", step_delay_seconds=1.0),
    ):
        # GIVEN acme with nothing left on pydoc-gpt from before, then two async
        # generations there, on a version slow enough (a second a step) that they
        # are still queued or running when it asks again
        wait_for(lambda: queued_on(capped, "acme", GENERATION_MODEL) == 0, timeout_s=30)
        slow = {**acme, "x-model-version": "slow-queued"}
        for _ in range(MAX_QUEUED):
            queued = http.post(
                f"/v1/models/{GENERATION_MODEL}/generate?async=true", json=slow_body, headers=slow
            )
            assert queued.status_code == 202, queued.text
        # WHEN it asks for one more
        refused = http.post(
            f"/v1/models/{GENERATION_MODEL}/generate?async=true", json=slow_body, headers=acme
        )
        # THEN it is refused: 429 queue_full, Retry-After, the platform's error shape
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["code"] == "queue_full"
        # AND globex's generation on the same model is answered
        answer = http.post(
            f"/v1/models/{GENERATION_MODEL}/generate",
            json={"prompt": "Return the", "max_tokens": 2},
            headers={"x-api-key": keys["globex"], "x-deadline-ms": "20000"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "done"

        # AND once acme's work has drained (the worker gives each place back as it
        # stores the result), its next request is admitted again
        def admitted() -> httpx.Response | None:
            again = http.post(
                f"/v1/models/{GENERATION_MODEL}/generate?async=true",
                json={"prompt": "Return the", "max_tokens": 1},
                headers=acme,
            )
            return None if again.status_code == 429 else again

        again = wait_for(admitted, timeout_s=30)
        assert again.status_code == 202, again.text
