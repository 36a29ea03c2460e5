"""Every function that takes an Idempotency-Key (each model's router, the OpenAI
API's, and the jobs API's) may claim it: a conditional put of the key's item in the
results table, and an update that gives it back (``switchyard.idempotency``)."""

from __future__ import annotations

from aws_cdk.assertions import Template

from switchyard.manifest import Manifest

from .helpers import granted, router_function, statements

KEY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")


def _function_role(template: Template, description_start: str) -> str:
    for fn in template.find_resources("AWS::Lambda::Function").values():
        if fn["Properties"].get("Description", "").startswith(description_start):
            return fn["Properties"]["Role"]["Fn::GetAtt"][0]
    raise AssertionError(f"no function described {description_start!r}")


def test_every_function_that_takes_a_key_may_claim_and_give_it_back(
    serving_template: Template, manifest: Manifest
) -> None:
    table = "StorageResults"  # the data stack's output naming the results table's ARN
    roles = {
        "jobs API": _function_role(serving_template, "Switchyard router for GET /v1/models"),
        "OpenAI API": _function_role(serving_template, "Switchyard router for the OpenAI"),
    }
    for model in manifest.models:
        _, fn = router_function(serving_template, model)
        roles[f"{model}'s router"] = fn["Properties"]["Role"]["Fn::GetAtt"][0]
    for who, role in roles.items():
        granted_to = statements(serving_template, role)
        for action in KEY_ACTIONS:
            resources = granted(granted_to, action)
            assert any(table in r for r in resources), f"{who} lacks {action} on the results table"
