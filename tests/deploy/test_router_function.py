"""The router function as Lambda runs it: its asset and the core layer only, its
handler invoked with API Gateway REST proxy events, against the emulator and the
workers."""

from __future__ import annotations

import uuid

import pytest

from harness import lambda_events
from harness.waiting import wait_for
from switchyard_local.deployed import LambdaInitError, LambdaProcess, Launcher

from .conftest import (
    MODEL,
    answer,
    deployed_roots,
    rest_event,
    router_environment,
    start_function,
)

PREDICT = f"/v1/models/{MODEL}/predict"


def test_the_cold_start_imports_the_platform_from_the_asset_and_layer_only(
    router: LambdaProcess, launcher: Launcher
) -> None:
    task, layer = deployed_roots(launcher, "router")
    # GIVEN the router's cold start (module import, settings, clients)
    # THEN every module of the platform came from /var/task or /opt/python
    assert "switchyard_router.app" in router.modules and "switchyard.wiring" in router.modules
    for name, file in router.modules.items():
        root = task if name.startswith("switchyard_router") or name == "handler" else layer
        assert file.startswith(f"{root}/"), f"{name} was imported from {file}"
    # and nothing of the local platform, the manifest or a model library
    assert not any(n.startswith("switchyard_local") for n in router.modules)
    assert "switchyard.manifest" not in router.modules
    assert not {"torch", "transformers", "sentence_transformers"} & set(router.top_level)


def test_the_cold_start_compiles_no_module(router: LambdaProcess) -> None:
    # GIVEN the router's cold start, on read-only code as in Lambda
    # THEN every module it imported, the platform's, its packages' and the runtime's
    # SDK's, had its bytecode: none was compiled from source on the way
    assert "botocore" in router.top_level
    assert router.compiled_at_start == []


def test_the_cold_start_freezes_what_it_made_and_leaves_the_collector_on(
    router: LambdaProcess,
) -> None:
    # GIVEN the router's cold start, which runs with the cyclic collector off
    # THEN the collector is on again for the requests, and the init's objects (the
    # app, its routes, the clients) are frozen out of its reach
    assert router.gc["enabled"] is True
    assert router.gc["frozen"] > 50_000


def test_a_predict_is_answered_by_the_workers(router: LambdaProcess, platform) -> None:
    body = {"inputs": ["a sentence to embed", "and another one"]}
    status, result, headers = answer(
        router.invoke(rest_event(platform, "POST", PREDICT, body=body))
    )
    assert status == 200, result
    assert result["status"] == "done" and result["model"] == MODEL and result["version"] == "v1"
    assert [len(vector) for vector in result["outputs"]] == [384, 384]
    assert headers["x-model-version"] == "v1"


def test_inputs_that_break_the_signature_are_refused_with_the_field(
    router: LambdaProcess, platform
) -> None:
    body = {"inputs": ["fine", ""]}
    status, result, _ = answer(router.invoke(rest_event(platform, "POST", PREDICT, body=body)))
    assert status == 422
    assert result["code"] == "invalid_input"
    assert result["errors"] == [{"field": "inputs[1]", "message": "must not be empty"}]


@pytest.mark.parametrize("key_id", ["no-such-key-id", ""])
def test_a_key_id_of_no_tenant_is_forbidden(router: LambdaProcess, platform, key_id) -> None:
    e = rest_event(platform, "POST", PREDICT, body={"inputs": ["x"]}, key_id=key_id)
    status, result, _ = answer(router.invoke(e))
    assert status == 403 and result["code"] == "forbidden"


def test_another_models_predict_is_not_this_routers(router: LambdaProcess, platform) -> None:
    e = rest_event(platform, "POST", "/v1/models/digits-cnn/predict", body={"inputs": [[0] * 64]})
    status, result, _ = answer(router.invoke(e))
    assert status == 404 and result["code"] == "unknown_model"


def test_an_async_request_is_read_back_through_the_requests_router(
    router: LambdaProcess, requests_router: LambdaProcess, platform
) -> None:
    # GIVEN an async predict through the model's router
    e = rest_event(platform, "POST", PREDICT, body={"inputs": ["later"]}, query={"async": "true"})
    status, accepted, headers = answer(router.invoke(e))
    assert status == 202 and accepted["status"] == "queued"
    # THEN its Location carries API Gateway's stage
    location = headers["location"]
    assert location == f"/dev/v1/requests/{accepted['request_id']}"
    path = location.removeprefix("/dev")

    # WHEN the caller polls it
    def done() -> dict | None:
        code, body, _ = answer(requests_router.invoke(rest_event(platform, "GET", path)))
        assert code == 200, body
        return body if body["status"] == "done" else None

    result = wait_for(done)
    assert len(result["outputs"][0]) == 384
    # and another tenant cannot see it
    other = rest_event(platform, "GET", path, tenant="globex")
    assert answer(requests_router.invoke(other))[0] == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (PREDICT, lambda texts: {"inputs": texts}),
        ("/openai/v1/embeddings", lambda texts: {"model": MODEL, "input": texts}),
    ],
    ids=["predict", "openai-embeddings"],
)
def test_a_request_past_its_deadline_is_located_under_the_stage(
    router: LambdaProcess, requests_router: LambdaProcess, platform, path, body
) -> None:
    # GIVEN a REST event of the prod stage whose deadline passes before any answer:
    # long texts no one asked before, which the worker takes far longer to embed
    # than the router takes to hand them off (a worker that answered first would be
    # answered 200, rightly)
    provisioned = platform.provisioned
    asked = uuid.uuid4()
    words = " ".join(f"word{i}" for i in range(300))
    event = lambda_events.rest_event(
        "POST",
        path,
        api_key=provisioned.api_keys["acme"],
        api_key_id=provisioned.api_key_ids["acme"],
        body=body([f"{asked} text {n}: {words}" for n in range(16)]),
        stage="prod",
    )
    event["headers"]["x-deadline-ms"] = "1"
    event["multiValueHeaders"]["x-deadline-ms"] = ["1"]
    # WHEN the router answers it (native or OpenAI-compatible, the same outcome)
    status, accepted, headers = answer(router.invoke(event))
    # THEN it is queued, and its Location carries the stage, as API Gateway serves it
    assert status == 202, accepted
    location = f"/prod/v1/requests/{accepted['request_id']}"
    assert headers["location"] == accepted["location"] == location

    # and the worker's outputs are read there in the end
    def done() -> dict | None:
        event = rest_event(platform, "GET", location.removeprefix("/prod"))
        code, record, _ = answer(requests_router.invoke(event))
        assert code == 200, record
        return record if record["status"] == "done" else None

    assert len(wait_for(done)["outputs"]) == 16


def test_the_catalog_lists_every_registered_version(requests_router: LambdaProcess, platform):
    status, body, _ = answer(requests_router.invoke(rest_event(platform, "GET", "/v1/models")))
    assert status == 200
    versions = {m["model"]: [v["version"] for v in m["versions"]] for m in body["models"]}
    # every model's demo versions, registered at start
    assert versions == {
        name: list(spec.demo_versions) for name, spec in platform.manifest.models.items()
    }
    assert versions["digits-cnn"] == ["v1", "v2"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SWITCHYARD_TENANT_KEYS", None), ("SWITCHYARD_QUEUES", "{not json")],
)
def test_a_bad_setting_fails_the_cold_start_naming_it(platform, variable, value) -> None:
    environment = router_environment(platform, [MODEL])
    if value is None:
        del environment[variable]
    else:
        environment[variable] = value
    with pytest.raises(LambdaInitError, match=variable):
        start_function(platform, "router", "broken-router", environment)


def test_a_repeated_predict_is_answered_from_the_result_cache(
    router: LambdaProcess, platform
) -> None:
    # GIVEN a sentence the workers answered for acme twice: the router caches inputs
    # from their second sight (the first costs the cache nothing), and the worker
    # fills the entry just after it stores the result
    body = {"inputs": ["a sentence asked about more than twice"]}
    for _ in range(2):
        event = rest_event(platform, "POST", PREDICT, body=body)
        status, first, headers = answer(router.invoke(event))
        assert status == 200 and "x-cache" not in headers

    # WHEN acme asks again, THEN the cache answers with the same outputs
    def repeat() -> tuple[dict, dict] | None:
        _, again, headers = answer(router.invoke(rest_event(platform, "POST", PREDICT, body=body)))
        return (again, headers) if headers.get("x-cache") == "hit" else None

    again, headers = wait_for(repeat, timeout_s=30, every_s=0.2)
    assert again["outputs"] == first["outputs"] and again["request_id"] != first["request_id"]
    assert headers["x-model-version"] == "v1" and "cache_ms" in again["timings"]
    # and another tenant asking the same is answered by a worker, as is acme with no-cache
    other = rest_event(platform, "POST", PREDICT, body=body, tenant="globex")
    status, theirs, headers = answer(router.invoke(other))
    assert status == 200 and "x-cache" not in headers and theirs["outputs"] == first["outputs"]
    fresh = rest_event(platform, "POST", PREDICT, body=body)
    fresh["headers"]["cache-control"] = "no-cache"
    fresh["multiValueHeaders"]["cache-control"] = ["no-cache"]
    status, _, headers = answer(router.invoke(fresh))
    assert status == 200 and "x-cache" not in headers
