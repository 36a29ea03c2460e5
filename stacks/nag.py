"""cdk-nag acknowledgments, each with the reason it holds for this platform.

cdk-nag 3 reports through CDK's validation framework: an acknowledgment is
``Validations.of(construct).acknowledge(...)`` and names one finding. Findings
about a resource name it by logical ID, which the helpers below resolve.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Accept one cdk-nag finding on ``construct`` (and its children), with why."""
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))


def logical_id(resource: IConstruct) -> str:
    """The CloudFormation logical ID of a resource or of an L2's default child."""
    element = resource if isinstance(resource, CfnElement) else resource.node.default_child
    stack = Stack.of(resource)
    return str(stack.resolve(stack.get_logical_id(element)))  # type: ignore[arg-type]


def objects_of(resource: IConstruct, attribute: str = "Arn") -> str:
    """The IAM5 finding for ``<resource ARN>/*`` (every object or item below it)."""
    return f"AwsSolutions-IAM5[Resource::<{logical_id(resource)}.{attribute}>/*]"
