"""Tenants' budgets in the synthesized stage: an 80 % alarm per budgeted tenant, and
every function that holds tenants to their budgets may read them (one BatchGetItem
of the results table)."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Template

from switchyard.manifest import Manifest

from .conftest import Synthesized
from .helpers import breaches, granted, logical_id, statements


def test_each_budgeted_tenant_has_an_alarm_at_four_fifths_of_its_budget(
    dev: Synthesized, manifest: Manifest
) -> None:
    base = manifest.names("dev").base
    budgeted = manifest.budgeted_tenants()
    assert budgeted  # the shipped manifest gives its tenants budgets
    alarms = dev.serving.find_resources("AWS::CloudWatch::Alarm")
    named = {a["Properties"].get("AlarmName"): a for a in alarms.values()}
    for tenant in manifest.tenants:
        alarm = named.get(f"{base}-{tenant}-budget-80pct")
        assert (alarm is not None) is (tenant in budgeted), tenant
        if alarm is None:
            continue
        props = alarm["Properties"]
        assert props["MetricName"] == "TenantBudgetUsed"
        assert props["Namespace"] == "Switchyard"
        assert props["Dimensions"] == [{"Name": "tenant", "Value": tenant}]
        # it fires at 80 % used and not below
        assert breaches(alarm, 80.0) and not breaches(alarm, 79.9) and not breaches(alarm, None)


def test_every_function_that_reads_budgets_may_read_them(
    dev: Synthesized, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    results = logical_id(dev.data, "AWS::DynamoDB::Table", {"TableName": names.results_table})
    holders = _budget_holders(dev.serving)
    # the routers of every model, the requests and jobs API, and the OpenAI API
    assert len(holders) >= len(manifest.models) + 2
    for name, fn in holders.items():
        role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        allowed = granted(statements(dev.serving, role), "dynamodb:BatchGetItem")
        assert any(results in r for r in allowed), name


def _budget_holders(template: Template) -> dict[str, dict[str, Any]]:
    """The functions given tenants' budgets in their settings."""
    return {
        name: fn
        for name, fn in template.find_resources("AWS::Lambda::Function").items()
        if "SWITCHYARD_TENANT_BUDGETS"
        in fn["Properties"].get("Environment", {}).get("Variables", {})
    }
