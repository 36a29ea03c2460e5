"""dev and prod differ only where the manifest's stage settings say."""

from __future__ import annotations

from aws_cdk.assertions import Template

from switchyard.manifest import Manifest


def _min_capacity(template: Template) -> list[int]:
    return sorted(
        t["Properties"]["MinCapacity"]
        for t in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
    )


def test_dev_scales_every_model_to_zero(serving_template: Template) -> None:
    assert set(_min_capacity(serving_template)) == {0}


def test_prod_keeps_the_minimum_tasks_of_hot_models(
    prod_serving_template: Template, manifest: Manifest
) -> None:
    expected = sorted(spec.min_tasks_prod for spec in manifest.models.values())
    assert _min_capacity(prod_serving_template) == expected
    assert any(spec.hot and spec.min_tasks_prod > 0 for spec in manifest.models.values())


def test_prod_waits_longer_before_scaling_in(
    prod_serving_template: Template, manifest: Manifest
) -> None:
    idle = manifest.stages["prod"].idle_minutes_before_scale_in
    alarms = prod_serving_template.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"EvaluationPeriods": idle}}
    )
    assert len(alarms) == len(manifest.models)


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
