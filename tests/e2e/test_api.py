"""The public API on the running local platform."""

from __future__ import annotations

import gzip
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from harness.waiting import wait_for
from switchyard.manifest import load_manifest

DIGIT_ZERO = [
    0,
    0,
    5,
    13,
    9,
    1,
    0,
    0,
    0,
    0,
    13,
    15,
    10,
    15,
    5,
    0,
    0,
    3,
    15,
    2,
    0,
    11,
    8,
    0,
    0,
    4,
    12,
    0,
    0,
    8,
    8,
    0,
    0,
    5,
    8,
    0,
    0,
    9,
    8,
    0,
    0,
    4,
    11,
    0,
    1,
    12,
    7,
    0,
    0,
    2,
    14,
    5,
    10,
    12,
    0,
    0,
    0,
    0,
    6,
    13,
    10,
    0,
    0,
    0,
]


# Tests about what an answer holds give the platform a deadline a busy machine cannot
# miss, so that they get the answer in the body (200) rather than a 202 and a Location.
PATIENT_MS = "20000"


def auth(platform, tenant: str | None = None) -> dict[str, str]:
    return {
        "x-api-key": platform.keys[tenant] if tenant else platform.api_key,
        "x-deadline-ms": PATIENT_MS,
    }


def test_the_ready_line_names_the_url_and_a_working_key(platform):
    assert platform.ready_line == f"READY {platform.url} api_key={platform.api_key}"
    assert platform.api_key in platform.keys.values()


def test_minilm_returns_384_floats_per_input(platform, http):
    response = http.post(
        "/v1/models/minilm-embed/predict",
        json={"inputs": ["the cat sat on the mat", "a dog in the fog"]},
        headers=auth(platform),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "minilm-embed" and body["version"] == "v1"
    assert [len(v) for v in body["outputs"]] == [384, 384]
    assert all(isinstance(x, float) for x in body["outputs"][0])
    norm = sum(x * x for x in body["outputs"][0]) ** 0.5
    assert abs(norm - 1.0) < 1e-3  # all-MiniLM-L6-v2 normalises its embeddings
    assert {"queue_wait_ms", "compute_ms", "total_ms"} <= set(body["timings"])


def test_similar_sentences_have_closer_embeddings(platform, http):
    texts = ["How do I reset my password?", "I forgot my password", "Bananas are yellow"]
    vectors = http.post(
        "/v1/models/minilm-embed/predict", json={"inputs": texts}, headers=auth(platform)
    ).json()["outputs"]

    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2


def test_digits_cnn_returns_a_class_and_its_probabilities(platform, http):
    response = http.post(
        "/v1/models/digits-cnn/predict", json={"inputs": [DIGIT_ZERO]}, headers=auth(platform)
    )
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert output["class"] == 0 and output["label"] == "0"
    assert len(output["probabilities"]) == 10
    assert abs(sum(output["probabilities"]) - 1) < 1e-3
    assert response.headers["x-model-version"] == response.json()["version"]


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "field"),
    [
        ("/v1/models/digits-cnn/predict", {"inputs": [DIGIT_ZERO]}, {}, 401, None),
        (
            "/v1/models/digits-cnn/predict",
            {"inputs": [DIGIT_ZERO]},
            {"x-api-key": "nope"},
            403,
            None,
        ),
        ("/v1/models/nope/predict", {"inputs": [DIGIT_ZERO]}, "key", 404, None),
        ("/v1/models/digits-cnn/predict", "{oops", "key", 400, "body"),
        ("/v1/models/digits-cnn/predict", {"inputs": ["a"]}, "key", 422, "inputs[0]"),
        ("/v1/models/digits-cnn/predict", {"inputs": [DIGIT_ZERO[:10]]}, "key", 422, "inputs[0]"),
        ("/v1/models/digits-cnn/predict", {"inputs": [DIGIT_ZERO] * 300}, "key", 422, "inputs"),
        ("/v1/models/minilm-embed/predict", {"inputs": [7]}, "key", 422, "inputs[0]"),
        ("/v1/models/minilm-embed/predict", {"inputs": ["x" * 5000]}, "key", 422, "inputs[0]"),
        ("/v1/models/minilm-embed/predict", {"inputs": ["x" * 4000] * 300}, "key", 400, "body"),
    ],
)
def test_client_mistakes_are_answered_and_nothing_is_enqueued(
    platform, http, path, body, headers, status, field
):
    headers = auth(platform) if headers == "key" else headers
    # An earlier test's answered request may still have its message in flight
    # (the worker deletes it after writing the answer the router read).
    for model in ("digits-cnn", "minilm-embed"):
        platform.wait_until_idle(model)
    before = {m: platform.queue_depth(m) for m in ("digits-cnn", "minilm-embed")}
    if isinstance(body, str):
        response = http.post(
            path, content=body, headers={**headers, "content-type": "application/json"}
        )
    else:
        response = http.post(path, json=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["message"]
    if field:
        assert field in [e["field"] for e in response.json()["errors"]]
    assert {m: platform.queue_depth(m) for m in before} == before


def test_a_passed_deadline_gives_202_and_the_work_still_completes(platform, http):
    # Long texts no one asked before: the worker takes far longer to embed them than
    # the router takes to hand them off (a worker that answered first would be
    # answered 200, rightly)
    asked = uuid.uuid4()
    words = " ".join(f"word{i}" for i in range(300))
    response = http.post(
        "/v1/models/minilm-embed/predict",
        json={"inputs": [f"{asked} late but done {n}: {words}" for n in range(16)]},
        headers={**auth(platform), "x-deadline-ms": "1"},
    )
    assert response.status_code == 202
    location = response.headers["location"]
    assert location == f"/v1/requests/{response.json()['request_id']}"

    def finished() -> dict | None:
        status = http.get(location, headers=auth(platform)).json()
        return status if status["status"] != "queued" else None

    status = wait_for(finished, timeout_s=30, every_s=0.1, what="the late request's result")
    assert status["status"] == "done" and len(status["outputs"]) == 16


def test_async_requests_are_private_to_their_tenant(platform, http):
    response = http.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [DIGIT_ZERO]},
        headers=auth(platform, "acme"),
    )
    assert response.status_code == 202
    location = response.headers["location"]

    def done() -> httpx.Response | None:
        mine = http.get(location, headers=auth(platform, "acme"))
        return mine if mine.json()["status"] == "done" else None

    mine = wait_for(done, timeout_s=30, every_s=0.05, what="the async request's result")
    assert mine.json()["outputs"][0]["class"] == 0
    assert http.get(location, headers=auth(platform, "globex")).status_code == 404
    assert http.get("/v1/requests/unknown", headers=auth(platform, "acme")).status_code == 404


def test_models_lists_the_registry_and_health_and_docs_answer(platform, http):
    models = http.get("/v1/models", headers=auth(platform)).json()["models"]
    listed = {m["model"]: [v["version"] for v in m["versions"]] for m in models}
    manifest = load_manifest(platform.run_dir / "manifest.toml")
    # every model of the manifest, pooled ones too, with the versions it registered
    assert listed == {m: list(spec.demo_versions) for m, spec in manifest.models.items()}
    assert listed["digits-cnn"] == ["v1", "v2"] and "wine-mlp" in listed
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/docs").status_code == 200
    paths = http.get("/openapi.json").json()["paths"]
    assert {f"/v1/models/{model}/predict" for model in listed} <= set(paths)


def test_predictions_are_logged_to_s3_without_their_inputs(platform, http):
    secret = "my card number is 4111 1111 1111 1111"
    response = http.post(
        "/v1/models/minilm-embed/predict", json={"inputs": [secret]}, headers=auth(platform)
    )
    request_id = response.json()["request_id"]
    s3 = platform.client("s3")
    bucket = platform.info["names"]["prediction_logs_bucket"]

    def logged() -> tuple[list[dict], list[str]] | None:
        lines = []
        for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            # Firehose writes GZIP; the emulator ignores CompressionFormat.
            raw = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
            lines.extend(raw.decode().splitlines())
        mine = [json.loads(line) for line in lines if request_id in line]
        return (mine, lines) if mine else None

    mine, lines = wait_for(logged, timeout_s=20, every_s=0.2, what="the prediction's log in S3")
    assert len(mine) == 1
    assert mine[0]["model"] == "minilm-embed" and mine[0]["outputs"] == [{"dimensions": 384}]
    # The secret's words, not its digits alone: ids and timestamps may hold "4111".
    assert not any("card number" in line or "4111 1111" in line for line in lines)


def test_usage_plans_throttle_and_end_a_tenant_without_touching_the_others(platform, http):
    """The trial tier (tests/e2e/conftest.py): 2 calls/s, bursts of 4, 12 a day."""
    trial = {"x-api-key": platform.keys["initech"]}

    def call(_: int) -> httpx.Response:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            return client.get("/v1/models", headers=trial)

    with ThreadPoolExecutor(max_workers=12) as pool:  # 12 at once: far over 2 a second
        burst = list(pool.map(call, range(12)))
    statuses = [r.status_code for r in burst]
    assert statuses.count(200) >= 4  # the burst is served
    assert statuses.count(429) >= 1 and set(statuses) == {200, 429}
    throttled = next(r for r in burst if r.status_code == 429)
    assert throttled.json() == {
        "message": "Too many requests for this API key's usage plan",
        "code": "throttled",
    }
    assert http.get("/v1/models", headers=auth(platform, "acme")).status_code == 200

    answered = statuses.count(200)
    deadline = time.monotonic() + 30
    while (r := http.get("/v1/models", headers=trial)).json().get("code") != "quota_exceeded":
        assert time.monotonic() < deadline, "the quota never ran out"
        answered += r.status_code == 200
        time.sleep(0.3)
    assert r.status_code == 429
    assert r.json()["message"] == "This API key's daily quota is spent"
    assert answered == 12  # exactly the day's quota was served
    assert http.get("/v1/models", headers=auth(platform, "globex")).status_code == 200
