"""The OpenAPI document against the running platform: schemathesis generates
requests for every route from the document the platform serves and sends them
through the API Gateway stand-in, with the tenant's key and without one.

Every answer must be documented for its route (status, body schema, required
headers), none may be a 5xx, a 405 names the methods the path takes, and a request
the document allows is accepted. The one refusal the document cannot foresee is a
model's signature (its inputs' kind and shape, per model and version), and two
version pins that differ: a 422 of a schema-valid request must name only those.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import negative_data_rejection

from harness.waiting import wait_for
from switchyard.schemas import FORBIDDEN, UNAUTHORIZED

from .test_api import DIGIT_ZERO

# Each operation gets this many generated cases beyond the examples and the
# coverage phase's cases (one per boundary, missing part and undeclared method):
# about 700 requests in all, well under a minute once the platform is up.
KEYED_EXAMPLES = 100
KEYLESS_EXAMPLES = 10
# The longest a documented answer may take: a sync caller's deadline is at most
# 28 s (the router's MAX_DEADLINE_MS), then it gets 202.
CALL_TIMEOUT_S = 40
CASE_DEADLINE = timedelta(seconds=45)

# A request the schema allows may still be refused with 422 for what only the
# model decides (see signature_refusals_only), so 422 joins the usual answers.
ACCEPTED = ["2xx", "401", "403", "404", "409", "422", "429"]
# What the model decides on the OpenAI-compatible routes, answered 400 there: an
# input its signature refuses (a prompt too long, max_tokens over its limit), a
# prompt over its context, a model that does not do what the route asks, or
# embeddings asked in dimensions the model does not embed in.
MODEL_DECIDES = {"invalid_input", "context_length_exceeded", "wrong_task", "wrong_dimensions"}


@schemathesis.check
def signature_refusals_only(ctx: Any, response: Any, case: Any) -> None:
    """A schema-valid request is refused only for its inputs (the signature of the
    model and version it reached) or for two version pins that differ."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    if case.path.startswith("/openai/") and response.status_code == 400:
        # OpenAI's 400 is the platform's 422: only what the model decides.
        code = response.json()["error"]["code"]
        if code not in MODEL_DECIDES:
            raise AssertionError(f"a schema-valid request was refused: {response.text}")
        return
    if response.status_code != 422:
        return
    body = response.json()
    fields = [e["field"] for e in body.get("errors", [])]
    pinned_twice = fields == ["params.version"] and "x-model-version" in (case.headers or {})
    # The signature's refusal names the inputs on predict; on generate the request is
    # the input, and its fields are named as sent (top_k, prompt).
    by_signature = bool(fields) and (
        all(f.startswith("inputs") for f in fields)
        or (case.path.endswith("/generate") and body.get("code") == "invalid_input")
    )
    if not pinned_twice and not by_signature:
        raise AssertionError(f"a schema-valid request was refused for {fields}: {response.text}")


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
                "include-path-regex": "^/openai/",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            }
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


keyed = schemathesis.pytest.from_fixture("keyed_api")
keyless = schemathesis.pytest.from_fixture("keyless_api")


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
    if case.path.startswith(("/v1/", "/openai/")):
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
