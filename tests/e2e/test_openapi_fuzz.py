"""The OpenAPI document against the running platform: schemathesis generates
requests for every route from the document the platform serves and sends them
through the API Gateway stand-in, with the tenant's key and without one.

Every answer must be documented for its route (status, body schema, required
headers), none may be a 5xx, a 405 names the methods the path takes, and a request
the document allows is accepted (schemathesis's every check, positive data
acceptance included). The document states each model's own request (its
signature), so a schema-valid request reaches a model that takes it. What no schema
can state is counted by the model itself, in tokens and in numbers: a prompt and
max_tokens over a generation model's context, and embeddings asked in more
dimensions than the model has. Those two refusals, by their codes, are the only
ones a schema-valid request may get (``model_counts_only``). The one rule between
two parts of a request, that a version pinned by header and by body agree, is kept
by the generated requests themselves (``pins_agree``).

A pool's models differ only in their signatures: the fuzz tries each pool's first
model's route, with every model's of its own (``NOT_FUZZED``), to keep its time.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import negative_data_rejection

from harness.waiting import wait_for
from stacks.assets import MANIFEST_FILE
from switchyard.idempotency import KEY_PATTERN
from switchyard.manifest import load_manifest
from switchyard.schemas import FORBIDDEN, UNAUTHORIZED

from .conftest import GENERATION_MODEL
from .test_api import DIGIT_ZERO

# Each operation gets this many generated cases beyond the examples and the
# coverage phase's cases (one per boundary, missing part and undeclared method).
KEYED_EXAMPLES = 60
KEYLESS_EXAMPLES = 10
# The longest a documented answer may take: a sync caller's deadline is at most
# 28 s (the router's MAX_DEADLINE_MS), then it gets 202.
CALL_TIMEOUT_S = 40
CASE_DEADLINE = timedelta(seconds=45)

# The routes of each pool's models but its first: the same router and pool worker
# behind a signature of their own (one pool model's route is fuzzed per pool).
_POOLS = load_manifest(MANIFEST_FILE)
_UNFUZZED = [m for pool in _POOLS.pools for m in _POOLS.pool_models(pool)[1:]]
NOT_FUZZED = f"^/v1/models/({'|'.join(map(re.escape, _UNFUZZED))})/" if _UNFUZZED else "^$"

# What a schema-valid request may be answered: done or queued, an unknown version
# (a generated pin), a request cancelled while it waited, the usage plan's limits.
ACCEPTED = ["2xx", "401", "403", "404", "409", "429"]
# The routes where the model counts what no schema states (400, by these codes).
MODEL_COUNTS = {
    "context_length_exceeded": f"^/v1/models/{GENERATION_MODEL}/|^/openai/v1/(chat/)?completions$",
    "wrong_dimensions": "^/openai/v1/embeddings$",
}


@schemathesis.check
def model_counts_only(ctx: Any, response: Any, case: Any) -> None:
    """A schema-valid request refused 400 is refused for what only its model counts:
    its prompt's tokens, or its embedding's size."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return
    body = response.json()
    code = body["error"]["code"] if case.path.startswith("/openai/") else body.get("code")
    if code not in MODEL_COUNTS:
        raise AssertionError(f"a schema-valid request was refused: {response.text}")


def pins_agree(case: Any) -> None:
    """A version pinned by the x-model-version header and by the body's params agree
    (the router refuses two that differ, 422): the one rule between a request's parts
    that its document cannot state."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    pinned = {k.lower(): v for k, v in (case.headers or {}).items()}.get("x-model-version")
    params = case.body.get("params") if isinstance(case.body, dict) else None
    if pinned is not None and isinstance(params, dict) and "version" in params:
        params["version"] = pinned


def keys_name_one_request(case: Any) -> None:
    """Every well-formed Idempotency-Key is a new one: a key names one request, and
    the same key with another body is refused (422), a rule between requests that
    no document of one request can state."""
    headers = case.headers or {}
    for name, value in list(headers.items()):
        if name.lower() == "idempotency-key" and re.fullmatch(KEY_PATTERN, str(value)):
            headers[name] = uuid.uuid4().hex


@schemathesis.check
def method_not_allowed_names_allow(ctx: Any, response: Any, case: Any) -> None:
    """Every 405, from any method, says which methods the path takes."""
    if response.status_code == 405 and not response.headers.get("allow"):
        raise AssertionError(f"405 without Allow for {response.request.method} {case.path}")


def _document(platform, key: str | None):
    config: dict[str, Any] = {
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
        "operations": [
            {
                "include-path-regex": paths,
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            }
            for paths in MODEL_COUNTS.values()
        ],
    }
    if key is not None:  # the document's own scheme, so schemathesis knows it for the key
        config["auth"] = {"openapi": {"apiKey": {"api_key": key}}}
    return schemathesis.openapi.from_url(
        f"{platform.url}/openapi.json", config=schemathesis.Config.from_dict(config)
    )


@pytest.fixture(scope="module")
def keyed_api(platform):
    return _document(platform, platform.api_key)


@pytest.fixture(scope="module")
def keyless_api(platform):
    return _document(platform, None)


# The Open Inference Protocol's infer body is any tensor: what a model takes (its
# input's name, shape and range) is in its metadata, not in a schema, so generated
# bodies are the model's refusals. tritonclient speaks it in test_inference_protocol.
PROTOCOL = "^/v2"
keyed = (
    schemathesis.pytest.from_fixture("keyed_api")
    .exclude(path_regex=NOT_FUZZED)
    .exclude(path_regex=PROTOCOL)
)
keyless = schemathesis.pytest.from_fixture("keyless_api").exclude(path_regex=NOT_FUZZED)


@keyed.parametrize()
@settings(
    max_examples=KEYED_EXAMPLES,
    deadline=CASE_DEADLINE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_every_answer_with_a_key_is_documented(case):
    # GIVEN a request generated from the document, with the tenant's key
    # WHEN it is sent through the gateway stand-in
    # THEN its answer passes every check (schemathesis's and the two above)
    pins_agree(case)
    keys_name_one_request(case)
    excluded = [negative_data_rejection] if only_an_unknown_header(case) else []
    case.call_and_validate(timeout=CALL_TIMEOUT_S, excluded_checks=excluded)


def only_an_unknown_header(case: Any) -> bool:
    """A case whose one negation is a header the route does not declare. API Gateway
    passes such headers on, as every HTTP server does, so accepting it is right;
    schemathesis means to let it pass too, but reads a numeric header's value back
    from the wire as a string and takes that for a second negation."""
    meta = case.meta
    if meta is None:
        return False
    negative = {loc for loc, c in meta.components.items() if c.mode.is_negative}
    if negative != {ParameterLocation.HEADER}:
        return False
    declared = {p.name.lower() for p in case.operation.headers}
    unknown = {h.lower() for h in case.headers or {}} - declared - {"x-api-key", "content-type"}
    return bool(unknown)


@keyless.parametrize()
@settings(
    max_examples=KEYLESS_EXAMPLES,
    deadline=CASE_DEADLINE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_without_a_key_every_api_call_gets_the_gateways_refusal(case):
    # GIVEN a request generated from the document, with no key (or one the
    # generator made up)
    # WHEN it is sent through the gateway stand-in
    response = case.call_and_validate(timeout=CALL_TIMEOUT_S)
    # THEN every API call is the gateway's documented refusal: 401 without a key,
    # 403 with one it does not know
    if case.path.startswith(("/v1/", "/openai/", "/v2")):
        headers = {k.lower(): v for k, v in (case.headers or {}).items()}
        answer = FORBIDDEN if headers.get("x-api-key") else UNAUTHORIZED
        assert response.status_code == answer.status, response.text
        assert response.json() == answer.body()


def test_the_document_is_served_through_the_gateway_stand_in(http):
    # WHEN the document is fetched where the fuzz fetches it, with no key
    document = http.get("/openapi.json")
    # THEN it is there, and names the key every /v1/ operation needs
    assert document.status_code == 200
    paths = document.json()["paths"]
    assert paths["/v1/requests/{request_id}"]["delete"]["security"] == [{"apiKey": []}]


def test_answers_about_real_requests_match_the_document(platform, http, keyed_api):
    # GIVEN a request that ran to the end
    key = {"x-api-key": platform.api_key}
    submitted = http.post(
        "/v1/models/digits-cnn/predict", json={"inputs": [DIGIT_ZERO]}, headers=key
    )
    assert submitted.status_code in (200, 202), submitted.text
    request_id = submitted.json()["request_id"]
    path = {"request_id": request_id}
    status = keyed_api["/v1/requests/{request_id}"]["GET"]
    cancel = keyed_api["/v1/requests/{request_id}"]["DELETE"]
    _wait_done(http, request_id, key)
    # WHEN its status is read and it is cancelled too late
    read = status.Case(path_parameters=path, headers=key).call_and_validate(timeout=CALL_TIMEOUT_S)
    refused = cancel.Case(path_parameters=path, headers=key).call_and_validate(
        timeout=CALL_TIMEOUT_S
    )
    # THEN both answers are the documented ones, bodies included
    assert read.status_code == 200 and read.json()["status"] == "done"
    assert refused.status_code == 409 and refused.json()["code"] == "already_finished"
    # AND a TRACE on the path names both of its methods
    traced = http.request("TRACE", f"/v1/requests/{request_id}", headers=key)
    assert traced.status_code == 405
    assert set(traced.headers["allow"].split(", ")) >= {"GET", "DELETE"}


def _wait_done(http: httpx.Client, request_id: str, key: dict[str, str]) -> None:
    wait_for(
        lambda: http.get(f"/v1/requests/{request_id}", headers=key).json()["status"] != "queued",
        timeout_s=120,
        every_s=0.1,
        what=f"request {request_id} never ended",
    )
