"""The concurrency budget in the templates: reserved concurrency per function family
(none for a pooled model's router unless the manifest reserves it), the authorizer's
cache per key, and the stage's throttle, each from the manifest."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest

from .conftest import Synthesized
from .helpers import integrated_function, resource_paths, router_function


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_each_function_family_reserves_its_share(
    request: pytest.FixtureRequest, manifest: Manifest, stage: str
) -> None:
    template: Template = request.getfixturevalue(
        "serving_template" if stage == "dev" else "prod_serving_template"
    )
    budget = manifest.stages[stage].concurrency  # type: ignore[index]
    for description, reserved in (
        ("API key authorizer", budget.authorizer),
        ("router for GET /v1/models", budget.jobs),
        ("OpenAI-compatible API", budget.openai),
        ("batch splitter", budget.splitter),
    ):
        template.has_resource_properties(
            "AWS::Lambda::Function",
            {
                "Description": Match.string_like_regexp(description),
                "ReservedConcurrentExecutions": reserved,
            },
        )
    for model, spec in manifest.models.items():
        _, router = router_function(template, model)
        expected = budget.generation if spec.generates else None if spec.pool else budget.predict
        # a pooled model's router reserves nothing (pooled_predict unset): the property
        # is absent, never 0, which would stop the function
        assert router["Properties"].get("ReservedConcurrentExecutions") == expected, model
    assert any(spec.pool for spec in manifest.models.values())


def test_pooled_routers_reserve_pooled_predict_once_it_is_set(
    synth: Callable[[Manifest, str], Synthesized], manifest: Manifest
) -> None:
    # GIVEN the manifest with a reservation for each pooled model's router
    data = manifest.model_dump(mode="json", exclude_none=True)
    for stage in data["stages"].values():
        stage["concurrency"] |= {"account_limit": 2_000, "pooled_predict": 70}
    reserving = Manifest.model_validate(data)
    # WHEN prod is synthesized
    template = synth(reserving, "prod").serving
    # THEN each pooled router reserves it, and the reservations add up to the budget's
    for model, spec in reserving.models.items():
        if spec.pool is not None:
            _, router = router_function(template, model)
            assert router["Properties"]["ReservedConcurrentExecutions"] == 70
    functions = template.find_resources("AWS::Lambda::Function").values()
    reserved = sum(f["Properties"].get("ReservedConcurrentExecutions", 0) for f in functions)
    assert reserved == sum(reserving.reserved_concurrency("prod").values())


def test_every_function_reserves_within_the_budget(
    serving_template: Template, manifest: Manifest
) -> None:
    functions = serving_template.find_resources("AWS::Lambda::Function")
    reserved = sum(
        f["Properties"].get("ReservedConcurrentExecutions", 0) for f in functions.values()
    )
    assert reserved == sum(manifest.reserved_concurrency("dev").values())
    assert reserved <= manifest.stages["dev"].concurrency.account_limit - 100
    assert all(f["Properties"].get("ReservedConcurrentExecutions") != 0 for f in functions.values())


def test_the_authorizer_caches_its_answer_per_key(
    serving_template: Template, manifest: Manifest
) -> None:
    ttl = manifest.stages["dev"].concurrency.authorizer_cache_seconds
    for header in ("x-api-key", "Authorization"):
        serving_template.has_resource_properties(
            "AWS::ApiGateway::Authorizer",
            {
                "Type": "REQUEST",
                "AuthorizerResultTtlInSeconds": ttl,
                "IdentitySource": f"method.request.header.{header}",
            },
        )
    # both are the one function
    authorizers = serving_template.find_resources("AWS::ApiGateway::Authorizer").values()
    assert len({integrated_function(a) for a in authorizers}) == 1


def test_openai_methods_are_keyed_on_the_bearer_token_and_the_rest_on_x_api_key(
    serving_template: Template,
) -> None:
    authorizers = serving_template.find_resources("AWS::ApiGateway::Authorizer")
    by_header = {a["Properties"]["IdentitySource"]: name for name, a in authorizers.items()}
    paths = resource_paths(serving_template)
    openai_proxy = {name for name, path in paths.items() if path == "/openai/v1/{proxy+}"}
    for name, method in serving_template.find_resources("AWS::ApiGateway::Method").items():
        props = method["Properties"]
        header = "Authorization" if props["ResourceId"].get("Ref") in openai_proxy else "x-api-key"
        assert props["AuthorizerId"] == {"Ref": by_header[f"method.request.header.{header}"]}, name


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_stage_is_throttled_for_every_tenant_together(
    request: pytest.FixtureRequest, manifest: Manifest, stage: str
) -> None:
    template: Template = request.getfixturevalue(
        "serving_template" if stage == "dev" else "prod_serving_template"
    )
    budget = manifest.stages[stage].concurrency  # type: ignore[index]
    template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "StageName": stage,
            "MethodSettings": Match.array_with(
                [
                    Match.object_like(
                        {
                            "HttpMethod": "*",
                            "ResourcePath": "/*",
                            "ThrottlingRateLimit": budget.throttle_rate,
                            "ThrottlingBurstLimit": budget.throttle_burst,
                        }
                    )
                ]
            ),
        },
    )
