"""Small readers of synthesized templates, shared by the infra tests."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Template


def only(template: Template, resource_type: str, props: Any | None = None) -> dict[str, Any]:
    """The one resource of a type (matching ``props``), as its template dict."""
    found = template.find_resources(resource_type, {"Properties": props} if props else None)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.values()))


def logical_id(template: Template, resource_type: str, props: Any) -> str:
    found = template.find_resources(resource_type, {"Properties": props})
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found))


def statements(template: Template, role_logical_id: str) -> list[dict[str, Any]]:
    """Every policy statement attached to a role (inline DefaultPolicy included)."""
    out: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} in policy["Properties"].get("Roles", []):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def actions_of(statements_: list[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for statement in statements_:
        value = statement["Action"]
        actions.update([value] if isinstance(value, str) else value)
    return actions
