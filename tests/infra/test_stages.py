"""dev and prod differ only where the manifest's stage settings say."""

from __future__ import annotations

from aws_cdk.assertions import Template

from switchyard.manifest import Manifest
from switchyard.scaling import ScalingPolicy


def _min_capacity(template: Template) -> list[int]:
    return sorted(
        t["Properties"]["MinCapacity"]
        for t in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
    )


def test_dev_scales_every_model_to_zero(serving_template: Template) -> None:
    assert set(_min_capacity(serving_template)) == {0}


def _policies(manifest: Manifest, stage: str) -> list[ScalingPolicy]:
    """Each worker service's scaling in ``stage``: a model's own, a pool's."""
    return [
        manifest.pool_scaling_policy(s, stage)
        if s in manifest.pools
        else manifest.scaling_policy(s, stage)
        for s in manifest.services()
    ]


def test_prod_keeps_the_minimum_tasks_of_hot_models(
    prod_serving_template: Template, manifest: Manifest
) -> None:
    expected = sorted(policy.min_tasks for policy in _policies(manifest, "prod"))
    assert _min_capacity(prod_serving_template) == expected
    assert manifest.scaling_policy("minilm-embed", "prod").min_tasks > 0


def test_prod_waits_longer_before_scaling_in(
    prod_serving_template: Template, manifest: Manifest
) -> None:
    idle = {
        stage: manifest.scaling_policy("minilm-embed", stage).idle_seconds
        for stage in manifest.stages
    }
    assert idle["prod"] > idle["dev"]
    alarms = prod_serving_template.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"EvaluationPeriods": idle["prod"] // 60}}
    )
    assert len(alarms) == len(manifest.services())


def test_prod_keeps_its_data_when_a_stack_goes(
    data_template: Template, prod_data_template: Template
) -> None:
    def policies(template: Template) -> set[str]:
        return {
            t["DeletionPolicy"] for t in template.find_resources("AWS::DynamoDB::Table").values()
        }

    assert policies(prod_data_template) == {"Retain"}
    assert policies(data_template) == {"Delete"}
    prod_data_template.all_resources_properties(
        "AWS::DynamoDB::Table", {"DeletionProtectionEnabled": True}
    )


def test_dev_pays_no_nat_gateway_while_idle(
    serving_template: Template, prod_serving_template: Template
) -> None:
    serving_template.resource_count_is("AWS::EC2::NatGateway", 0)
    assert len(prod_serving_template.find_resources("AWS::EC2::NatGateway")) >= 1
