"""REST API Gateway: keys on every method (x-api-key or Bearer, through the key
authorizer), usage plans per tier, validation, logs, metrics."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match, Template

from switchyard.auth import TENANT_TAG
from switchyard.manifest import Manifest

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


def test_predict_bodies_are_validated_against_the_model_limits(
    serving_template: Template, manifest: Manifest
) -> None:
    serving_template.has_resource_properties(
        "AWS::ApiGateway::RequestValidator",
        {"ValidateRequestBody": True, "ValidateRequestParameters": True},
    )
    for model, spec in manifest.models.items():
        serving_template.has_resource_properties(
            "AWS::ApiGateway::Model",
            {
                "ContentType": "application/json",
                "Schema": Match.object_like(
                    {
                        "title": f"{model}-predict",
                        "required": ["inputs"],
                        "additionalProperties": False,
                        "properties": {
                            "inputs": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": spec.max_inputs_per_request,
                            },
                            # A version pin, which the router accepts too.
                            "params": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "version": {
                                        "type": "string",
                                        "minLength": 1,
                                        "maxLength": 64,
                                    }
                                },
                            },
                        },
                    }
                ),
            },
        )
    serving_template.has_resource_properties(
        "AWS::ApiGateway::Method",
        {
            "HttpMethod": "POST",
            "RequestValidatorId": Match.any_value(),
            "RequestModels": {"application/json": Match.any_value()},
        },
    )


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
