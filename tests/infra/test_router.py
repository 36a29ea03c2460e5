"""Router Lambda per model: FastAPI through Mangum (or, for a generation model,
uvicorn under the Lambda Web Adapter), current runtime, Powertools, the AppConfig
extension, least privilege, and a timeout below the integration's."""

from __future__ import annotations

import json
from collections.abc import Callable

from aws_cdk.assertions import Match, Template

from stacks.cloud import (
    API_INTEGRATION_TIMEOUT,
    APPCONFIG_EXTENSION_LAYER,
    LAMBDA_RUNTIME,
    STREAM_INTEGRATION_TIMEOUT,
    WEB_ADAPTER_HANDLER,
)
from stacks.endpoint import generates
from switchyard.manifest import Manifest

from .conftest import Synthesized
from .helpers import (
    actions_of,
    as_list,
    assert_workers_update_first,
    granted,
    logical_id,
    methods_at,
    named,
    router_function,
    statements,
)


def test_each_model_has_a_router_on_a_current_runtime(
    serving_template: Template, manifest: Manifest
) -> None:
    for model, spec in manifest.models.items():
        _, fn = router_function(serving_template, model)
        # handler = Mangum(app); a generation model's runs the same app under uvicorn
        expected = WEB_ADAPTER_HANDLER if generates(spec) else "handler.handler"
        assert fn["Properties"]["Handler"] == expected
        assert fn["Properties"]["Runtime"] == LAMBDA_RUNTIME.name == "python3.14"
        assert fn["Properties"]["TracingConfig"] == {"Mode": "Active"}


def test_router_environment_follows_the_settings_contract(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model in manifest.models:
        _, fn = router_function(serving_template, model)
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["SWITCHYARD_STAGE"] == "dev"
        assert env["SWITCHYARD_ROUTING_SOURCE"] == "appconfig-extension"
        assert env["SWITCHYARD_APPCONFIG_APPLICATION"] == names.appconfig_application
        assert env["POWERTOOLS_SERVICE_NAME"] == "router"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Switchyard"
        assert env["AWS_APPCONFIG_EXTENSION_PREFETCH_LIST"] == (
            f"/applications/{names.appconfig_application}/environments/{model}"
            f"/configurations/{names.routing_profile(model)}"
        )
        assert "AWS_ENDPOINT_URL" not in env and "SWITCHYARD_AWS_ENDPOINT_URL" not in env
        for key in ("REGISTRY_TABLE", "RESULTS_TABLE", "PAYLOADS_BUCKET", "QUEUES"):
            assert f"SWITCHYARD_{key}" in env
        queues = json.dumps(env["SWITCHYARD_QUEUES"])
        assert f'\\"{model}\\":{{\\"realtime\\"' in queues, "QUEUES names only its own model"
        assert all(f'\\"{other}\\":' not in queues for other in manifest.models if other != model)


def test_router_carries_the_core_and_appconfig_extension_layers(
    serving_template: Template, manifest: Manifest
) -> None:
    core = logical_id(serving_template, "AWS::Lambda::LayerVersion", Match.any_value())
    for model in manifest.models:
        _, fn = router_function(serving_template, model)
        layers = {json.dumps(layer) for layer in fn["Properties"]["Layers"]}
        # (and a generation model's the Lambda Web Adapter: tests/infra/test_streaming.py)
        assert {
            json.dumps({"Ref": core}),
            json.dumps(APPCONFIG_EXTENSION_LAYER[manifest.platform.region]),
        } <= layers


def test_router_answers_before_the_api_gives_up(
    serving_template: Template, manifest: Manifest
) -> None:
    integration_ms = {
        m["Properties"]["Integration"]["TimeoutInMillis"]
        for m in serving_template.find_resources("AWS::ApiGateway::Method").values()
    }
    # 29 s buffered; a streamed response may last up to the stream timeout
    buffered_ms = API_INTEGRATION_TIMEOUT.to_milliseconds()
    stream_ms = STREAM_INTEGRATION_TIMEOUT.to_milliseconds()
    assert integration_ms <= {buffered_ms, stream_ms} and buffered_ms == 29_000
    for model, spec in manifest.models.items():
        _, fn = router_function(serving_template, model)
        (predict,) = methods_at(serving_template, f"/v1/models/{model}/predict").values()
        limit_ms = predict["Properties"]["Integration"]["TimeoutInMillis"]
        assert limit_ms == (stream_ms if generates(spec) else buffered_ms)
        assert spec.default_deadline_ms < fn["Properties"]["Timeout"] * 1000 < limit_ms


def test_router_role_reaches_only_its_own_queues_tables_and_profile(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model in manifest.models:
        _, fn = router_function(serving_template, model)
        role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        granted = statements(serving_template, role)
        assert (
            serving_template.find_resources(
                "AWS::IAM::Role", {"Properties": {"ManagedPolicyArns": Match.any_value()}}
            ).get(role)
            is None
        ), "the router role has no managed policy"
        send = [s for s in granted if "sqs:SendMessage" in actions_of([s])]
        queue_refs = {json.dumps(r) for s in send for r in as_list(s["Resource"])}
        # (the models stack's queues, named by their ARNs)
        own = {json.dumps(named("sqs", names.queue(model, lane))) for lane in ("realtime", "batch")}
        assert queue_refs == own
        appconfig = [s for s in granted if "appconfig:GetLatestConfiguration" in actions_of([s])]
        assert len(appconfig) == 1 and "/configuration/" in json.dumps(appconfig[0]["Resource"])
        assert "*" not in json.dumps(appconfig[0]["Resource"])
        assert not any(a.endswith("*") for a in actions_of(granted) if a.startswith("s3:"))
        assert not {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions_of(granted)


def test_every_router_may_read_results_together_where_no_tenant_has_a_budget(
    synth: Callable[[Manifest, str], Synthesized], manifest: Manifest
) -> None:
    # GIVEN a manifest whose tenants have no budgets (no budget reads to grant)
    data = manifest.model_dump(mode="json", exclude_none=True)
    for tenant in data["tenants"].values():
        tenant.pop("monthly_budget_usd", None)
        tenant.pop("over_budget", None)
    unbudgeted = Manifest.model_validate(data)
    assert not unbudgeted.budgeted_tenants()
    # WHEN it is synthesized
    stage = synth(unbudgeted, "dev")
    table = {"TableName": unbudgeted.names("dev").results_table}
    results = logical_id(stage.data, "AWS::DynamoDB::Table", table)
    # THEN every model's router may still read results with one BatchGetItem: its sync
    # callers' looks that fall due together are read so (switchyard_router.waiters)
    for model in unbudgeted.models:
        _, fn = router_function(stage.serving, model)
        role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        allowed = granted(statements(stage.serving, role), "dynamodb:BatchGetItem")
        assert any(results in r for r in allowed), model


def test_functions_that_send_work_are_updated_after_the_workers_that_read_it(
    serving_template: Template, manifest: Manifest, pooled_dev: Synthesized, pooled: Manifest
) -> None:
    # A router may send a message form that a worker of the release before refuses
    # (a tensor's rows as one block of numbers): every worker service reading a
    # model's queues, its own or its pool's, is updated before the model's router
    # and the function of every model's protocols.
    assert_workers_update_first(serving_template, manifest)
    assert_workers_update_first(pooled_dev.serving, pooled)
