"""AppConfig per model: application, environment, schema-validated profile, rollout
strategy, and the model's canary alarms as the environment's monitors."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match, Template

from stacks.cloud import ROUTING_SCHEMA_FILE
from switchyard.manifest import Manifest

from .helpers import named, only


def test_one_application_holds_the_routing_documents(
    serving_template: Template, manifest: Manifest
) -> None:
    serving_template.resource_count_is("AWS::AppConfig::Application", 1)
    serving_template.has_resource_properties(
        "AWS::AppConfig::Application", {"Name": manifest.names("dev").appconfig_application}
    )


def test_each_profile_is_validated_by_the_shared_json_schema(
    serving_template: Template, manifest: Manifest
) -> None:
    schema = json.loads(ROUTING_SCHEMA_FILE.read_text())
    for model in manifest.models:
        serving_template.has_resource_properties(
            "AWS::AppConfig::ConfigurationProfile",
            {
                "Name": manifest.names("dev").routing_profile(model),
                "LocationUri": "hosted",
                "Validators": [{"Type": "JSON_SCHEMA", "Content": Match.serialized_json(schema)}],
            },
        )


def test_each_model_starts_with_all_traffic_on_its_first_version(
    serving_template: Template, manifest: Manifest
) -> None:
    versions = serving_template.find_resources("AWS::AppConfig::HostedConfigurationVersion")
    documents = sorted(
        (json.loads(v["Properties"]["Content"]) for v in versions.values()),
        key=lambda doc: json.dumps(doc, sort_keys=True),
    )
    expected = sorted(
        (
            {
                "schema_version": 1,
                "weights": {spec.demo_versions[0]: 100},
                "sticky_key": "x-user-id",
                "shadow": None,
                "fallback": None,
            }
            for spec in manifest.models.values()
        ),
        key=lambda doc: json.dumps(doc, sort_keys=True),
    )
    assert documents == expected
    assert {v["Properties"]["ContentType"] for v in versions.values()} == {"application/json"}


def test_environment_monitors_are_the_models_canary_alarms(
    serving_template: Template, models_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model in manifest.models:
        # the models stack's alarms, named by their ARNs
        canaries = [
            f"{names.base}-{model}-{kind}"
            for kind in (
                "canary-error-rate",
                "canary-error-rate-over-stable",
                "canary-latency-p99",
                "canary-latency-over-stable",
                "error-rate",
            )
        ]
        for alarm in canaries:
            only(models_template, "AWS::CloudWatch::Alarm", {"AlarmName": alarm})
        serving_template.has_resource_properties(
            "AWS::AppConfig::Environment",
            {
                "Name": model,
                "Monitors": [
                    {
                        "AlarmArn": named("cloudwatch", f"alarm:{alarm}"),
                        "AlarmRoleArn": Match.any_value(),
                    }
                    for alarm in canaries
                ],
            },
        )


def test_dev_deploys_routing_all_at_once_and_bakes_so_alarms_can_roll_it_back(
    serving_template: Template, manifest: Manifest
) -> None:
    bake = manifest.stages["dev"].config_bake_minutes
    assert bake > 0  # AppConfig watches its monitors only while deploying and baking
    serving_template.has_resource_properties(
        "AWS::AppConfig::DeploymentStrategy",
        {"GrowthFactor": 100, "DeploymentDurationInMinutes": 0, "FinalBakeTimeInMinutes": bake},
    )
    serving_template.has_resource_properties(
        "AWS::AppConfig::Deployment", {"DeploymentStrategyId": Match.any_value()}
    )


def test_prod_rolls_routing_out_linearly_with_bake_time(
    prod_serving_template: Template, manifest: Manifest
) -> None:
    prod_serving_template.has_resource_properties(
        "AWS::AppConfig::DeploymentStrategy",
        {
            "GrowthType": "LINEAR",
            "GrowthFactor": Match.any_value(),
            "DeploymentDurationInMinutes": Match.any_value(),
            "FinalBakeTimeInMinutes": manifest.stages["prod"].config_bake_minutes,
        },
    )
