"""REST API Gateway: keys on every method (x-api-key or Bearer, through the key
authorizer), usage plans per tier, validation (each body's model, as the router's
API document states it), logs, metrics."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match, Template

from harness.fakes import FakePayloads, FakeQueue, FakeRegistry, FakeResults, tenant_keys
from switchyard.auth import TENANT_TAG
from switchyard.bodies import (
    JobSubmission,
    chat_body_for,
    completion_body_for,
    draft4,
    embeddings_body_for,
    embeds,
    generate_body_for,
    generates,
    predict_body_for,
    request_schema,
)
from switchyard.manifest import Manifest, ModelSpec
from switchyard.queues import ModelLanes
from switchyard.registry import ModelVersion
from switchyard_router.app import RouterDeps, create_app
from switchyard_router.jobs_api import JobsApi
from switchyard_router.logic import PredictService

from .helpers import actions_of, integrated_function, statements


def test_every_method_requires_an_api_key(serving_template: Template) -> None:
    methods = serving_template.find_resources("AWS::ApiGateway::Method")
    assert methods, "the API has no methods"
    assert {name: m["Properties"].get("ApiKeyRequired") for name, m in methods.items()} == {
        name: True for name in methods
    }


def test_each_tier_has_a_usage_plan_with_rate_burst_and_quota(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for tier_name, tier in manifest.tiers.items():
        serving_template.has_resource_properties(
            "AWS::ApiGateway::UsagePlan",
            {
                "UsagePlanName": names.usage_plan(tier_name),
                "Throttle": {"RateLimit": tier.rate, "BurstLimit": tier.burst},
                "Quota": {"Limit": tier.quota_per_day, "Period": "DAY"},
                "ApiStages": Match.array_with([Match.object_like({"Stage": Match.any_value()})]),
            },
        )


def test_each_tenant_has_a_tagged_key_in_its_tier_plan(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    keys = serving_template.find_resources("AWS::ApiGateway::ApiKey")
    plans = serving_template.find_resources("AWS::ApiGateway::UsagePlan")
    links = serving_template.find_resources("AWS::ApiGateway::UsagePlanKey")
    for tenant_name, tenant in manifest.tenants.items():
        key_id = next(
            k for k, v in keys.items() if v["Properties"]["Name"] == names.api_key(tenant_name)
        )
        assert {"Key": TENANT_TAG, "Value": tenant_name} in keys[key_id]["Properties"]["Tags"]
        plan_id = next(
            p
            for p, v in plans.items()
            if v["Properties"]["UsagePlanName"] == names.usage_plan(tenant.tier)
        )
        assert any(
            link["Properties"]
            == {"KeyId": {"Ref": key_id}, "KeyType": "API_KEY", "UsagePlanId": {"Ref": plan_id}}
            for link in links.values()
        ), f"{tenant_name}'s key is not in the {tenant.tier} plan"


def test_predict_bodies_are_validated_by_the_gateway(serving_template: Template) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::RequestValidator",
        {"ValidateRequestBody": True, "ValidateRequestParameters": True},
    )
    serving_template.has_resource_properties(
        "AWS::ApiGateway::Method",
        {
            "HttpMethod": "POST",
            "RequestValidatorId": Match.any_value(),
            "RequestModels": {"application/json": Match.any_value()},
        },
    )


def test_each_predict_model_is_the_models_own_body_as_the_api_document_states(
    serving_template: Template, manifest: Manifest
) -> None:
    # GIVEN each model's own predict body, rendered from its pydantic model
    # WHEN the CDK app renders API Gateway's model and the router its API document
    document = api_document(manifest)
    synthesized = {
        m["Properties"]["Schema"]["title"]: m["Properties"]["Schema"]
        for m in serving_template.find_resources("AWS::ApiGateway::Model").values()
    }
    for model, spec in manifest.models.items():
        rendered = request_schema(
            predict_body_for(model, (spec.signature,), spec.max_inputs_per_request)
        )
        gateway = synthesized[f"{model}-predict"]
        # THEN the gateway's is that body in its dialect (draft 4, numbers as doubles)
        assert gateway.pop("$schema") == "http://json-schema.org/draft-04/schema#"
        assert as_doubles(gateway) == as_doubles(draft4(rendered)), model
        # AND the document's is that body
        assert body_schema(document, f"/v1/models/{model}/predict") == rendered, model


def test_every_body_the_api_document_states_is_rendered_from_its_model(
    manifest: Manifest,
) -> None:
    # GIVEN the router's API document over the manifest's models
    document = api_document(manifest)
    versions = {m: demo_versions(m, spec)[0] for m, spec in manifest.models.items()}
    generating = {m: v.signature for m, v in versions.items() if generates([v])}
    embedding = {m: v for m, v in versions.items() if embeds([v])}
    assert generating and embedding, "the manifest has a generation and an embedding model"

    def one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
        return schemas[0] if len(schemas) == 1 else {"oneOf": schemas}

    # THEN each body it states is its model's (each model's own, where the body is)
    expected = {
        "/v1/jobs": request_schema(JobSubmission),
        **{
            f"/v1/models/{m}/generate": request_schema(generate_body_for(s))  # type: ignore[arg-type]
            for m, s in generating.items()
        },
        "/openai/v1/completions": one_of(
            [request_schema(completion_body_for(m, s)) for m, s in generating.items()]  # type: ignore[arg-type]
        ),
        "/openai/v1/chat/completions": one_of(
            [request_schema(chat_body_for(m, s)) for m, s in generating.items()]  # type: ignore[arg-type]
        ),
        "/openai/v1/embeddings": one_of(
            [
                request_schema(
                    embeddings_body_for(m, v.signature, v.max_inputs_per_request)  # type: ignore[arg-type]
                )
                for m, v in embedding.items()
            ]
        ),
    }
    for path, schema in expected.items():
        assert body_schema(document, path) == schema, path
    # AND no route states a body of a model that does not take it
    assert set(document["paths"]) >= set(expected)
    assert "/v1/models/{model}/predict" not in document["paths"]
    assert not {f"/v1/models/{m}/generate" for m in manifest.models if m not in generating} & set(
        document["paths"]
    )


def demo_versions(model: str, spec: ModelSpec) -> list[ModelVersion]:
    return [
        spec.version_record(model, version, f"s3://models/{model}/{version}", "0" * 64)
        for version in spec.demo_versions or ("v1",)
    ]


def api_document(manifest: Manifest) -> dict[str, Any]:
    """The router's API document, over the manifest's models and their versions."""
    records = [v for m, spec in manifest.models.items() for v in demo_versions(m, spec)]
    service = PredictService(
        endpoints={
            m: ModelLanes(FakeQueue("realtime"), FakeQueue("batch")) for m in manifest.models
        },
        registry=FakeRegistry(*records),
        results=FakeResults(),
        payloads=FakePayloads(),
        routing=None,
        result_ttl_seconds=60,
        claim_check_bytes=1,
    )
    jobs = JobsApi(store=None, s3=None, registry=None, models=list(manifest.models),  # type: ignore[arg-type]
                   drop_bucket="drop", ttl_seconds=60)  # fmt: skip
    deps = RouterDeps(service=service, tenants=tenant_keys({}), max_body_bytes=1, jobs=jobs)
    return create_app(deps).openapi()


def body_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    body = document["paths"][path]["post"]["requestBody"]
    return body["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def as_doubles(schema: Any) -> Any:
    """Every number as the double it is in a template (CloudFormation's JSON)."""
    return json.loads(json.dumps(schema), parse_int=float)


def test_a_request_can_be_read_and_cancelled(serving_template: Template) -> None:
    methods = serving_template.find_resources("AWS::ApiGateway::Method")
    resources = serving_template.find_resources("AWS::ApiGateway::Resource")
    by_path = {name: r["Properties"]["PathPart"] for name, r in resources.items()}
    on_request = sorted(
        m["Properties"]["HttpMethod"]
        for m in methods.values()
        if by_path.get(m["Properties"].get("ResourceId", {}).get("Ref")) == "{request_id}"
    )
    assert on_request == ["DELETE", "GET"]


def test_stage_writes_access_logs_and_metrics(serving_template: Template) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "StageName": "dev",
            "AccessLogSetting": {
                "DestinationArn": Match.any_value(),
                "Format": Match.string_like_regexp(r"\$context\.identity\.apiKeyId"),
            },
            "MethodSettings": Match.array_with(
                [Match.object_like({"MetricsEnabled": True, "LoggingLevel": "ERROR"})]
            ),
            "TracingEnabled": True,
        },
    )


def test_invalid_bodies_are_answered_like_the_router(serving_template: Template) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "BAD_REQUEST_BODY",
            "StatusCode": "422",
            "ResponseTemplates": {
                "application/json": Match.string_like_regexp('"code": "invalid_input"')
            },
        },
    )


def test_a_body_over_the_payload_limit_is_answered_with_the_documented_error(
    serving_template: Template,
) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "REQUEST_TOO_LARGE",
            "StatusCode": "413",
            "ResponseTemplates": {
                "application/json": Match.string_like_regexp('"code": "payload_too_large"')
            },
        },
    )


def _authorizer(template: Template) -> tuple[str, dict[str, Any]]:
    """The platform routes' authorizer (keyed on x-api-key; the OpenAI routes' one,
    keyed on the Bearer token, runs the same function: tests/infra/test_concurrency)."""
    (found,) = template.find_resources(
        "AWS::ApiGateway::Authorizer",
        {"Properties": {"IdentitySource": "method.request.header.x-api-key"}},
    ).items()
    return found


def test_keys_come_from_the_key_authorizer(serving_template: Template) -> None:
    # API Gateway checks the key the authorizer names (x-api-key or a Bearer token)
    # against the usage plans, as it checked the x-api-key header before
    serving_template.has_resource_properties(
        "AWS::ApiGateway::RestApi", {"ApiKeySourceType": "AUTHORIZER"}
    )


def test_every_method_goes_through_the_key_authorizer(serving_template: Template) -> None:
    authorizers = serving_template.find_resources("AWS::ApiGateway::Authorizer")
    function = {integrated_function(a) for a in authorizers.values()}
    assert len(function) == 1  # two cache keys (x-api-key, Bearer), one function
    methods = serving_template.find_resources("AWS::ApiGateway::Method")
    for method_name, method in methods.items():
        props = method["Properties"]
        assert props["AuthorizationType"] == "CUSTOM", method_name
        assert props["AuthorizerId"]["Ref"] in authorizers, method_name
        # and still needs a key, so the usage plans apply
        assert props["ApiKeyRequired"] is True, method_name


def test_the_authorizer_is_a_request_authorizer_cached_by_key(
    serving_template: Template, manifest: Manifest
) -> None:
    _, authorizer = _authorizer(serving_template)
    props = authorizer["Properties"]
    assert props["Type"] == "REQUEST"
    # cached per key, the header the function reads first on these routes
    ttl = manifest.stages["dev"].concurrency.authorizer_cache_seconds
    assert props["AuthorizerResultTtlInSeconds"] == ttl
    function = integrated_function(authorizer)
    fn = serving_template.find_resources("AWS::Lambda::Function")[function]["Properties"]
    assert fn["Handler"] == "handler.handler"
    assert not fn.get("Layers") and "TracingConfig" not in fn


def test_the_authorizer_role_writes_only_its_log_group(serving_template: Template) -> None:
    _, authorizer = _authorizer(serving_template)
    function = integrated_function(authorizer)
    fn = serving_template.find_resources("AWS::Lambda::Function")[function]["Properties"]
    role = fn["Role"]["Fn::GetAtt"][0]
    granted = statements(serving_template, role)
    assert actions_of(granted) == {"logs:CreateLogStream", "logs:PutLogEvents"}
    (statement,) = granted
    log_group = statement["Resource"]["Fn::GetAtt"][0]
    assert serving_template.find_resources("AWS::Logs::LogGroup").get(log_group)
    assert (
        serving_template.find_resources(
            "AWS::IAM::Role", {"Properties": {"ManagedPolicyArns": Match.any_value()}}
        ).get(role)
        is None
    )


def test_a_request_without_a_key_is_answered_401_like_the_router(
    serving_template: Template,
) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "UNAUTHORIZED",
            "StatusCode": "401",
            "ResponseTemplates": {
                "application/json": Match.string_like_regexp('"code": "unauthorized"')
            },
        },
    )
