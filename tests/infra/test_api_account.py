"""API Gateway's account-level CloudWatch role (``AWS::ApiGateway::Account``) is one
per account and region: the stack sets it only where the manifest asks."""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest

from .conftest import Synthesized


def test_the_account_role_is_left_alone_by_default(serving_template: Template) -> None:
    serving_template.resource_count_is("AWS::ApiGateway::Account", 0)


def test_a_stage_that_asks_sets_the_account_role(
    synth: Callable[[Manifest, str], Synthesized], manifest: Manifest
) -> None:
    # GIVEN dev with the account's CloudWatch role asked for
    stages = {
        name: settings.model_copy(update={"api_gateway_cloudwatch_role": name == "dev"})
        for name, settings in manifest.stages.items()
    }
    asking = manifest.model_copy(update={"stages": stages})

    # WHEN it is synthesized
    serving = synth(asking, "dev").serving

    # THEN API Gateway's account settings name the stack's logging role
    serving.has_resource_properties(
        "AWS::ApiGateway::Account",
        {"CloudWatchRoleArn": {"Fn::GetAtt": [Match.any_value(), "Arn"]}},
    )
