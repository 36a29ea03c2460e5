"""Linter acknowledgments (cdk-nag, cfn-lint, checkov), each with the reason it holds
for this platform.

cdk-nag 3 reports through CDK's validation framework: an acknowledgment is
``Validations.of(construct).acknowledge(...)`` and names one finding. Findings
about a resource name it by logical ID, which the helpers below resolve.
cfn-lint and checkov read theirs from each resource's template metadata
(:func:`ignore_cfn_lint`, :func:`skip_checkov`, :class:`LinterAcknowledgments`).
"""

from __future__ import annotations

import jsii
from aws_cdk import Acknowledgment, CfnElement, CfnResource, IAspect, Stack, Validations
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


# -- cfn-lint and checkov --------------------------------------------------------------
# Both read their acknowledgments from the template: cfn-lint from a resource's
# ``Metadata: cfn-lint: config: ignore_checks``, checkov from ``Metadata: checkov:
# skip: [{id, comment}]``. The helpers below write them, each with its reason, onto
# one resource; nothing is switched off for a whole template.


def _cfn_resource(resource: IConstruct) -> CfnResource:
    element = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not isinstance(element, CfnResource):
        raise TypeError(f"{resource.node.path} is not a CloudFormation resource")
    return element


def ignore_cfn_lint(resource: IConstruct, rule: str, reason: str) -> None:
    """Accept one cfn-lint rule on ``resource`` (an L1, or an L2's default child).
    cfn-lint reads ``config.ignore_checks``; ``reasons`` keeps the why beside it."""
    cfn = _cfn_resource(resource)
    metadata = dict(cfn.get_metadata("cfn-lint") or {})
    checks = list(metadata.get("config", {}).get("ignore_checks", []))
    reasons = dict(metadata.get("reasons", {}))
    if rule not in checks:
        checks.append(rule)
    reasons[rule] = reason
    cfn.add_metadata("cfn-lint", {"config": {"ignore_checks": checks}, "reasons": reasons})


def skip_checkov(resource: IConstruct, check: str, reason: str) -> None:
    """Accept one checkov check on ``resource``, with why (checkov prints it)."""
    cfn = _cfn_resource(resource)
    metadata = dict(cfn.get_metadata("checkov") or {})
    skips = [skip for skip in metadata.get("skip", []) if skip.get("id") != check]
    skips.append({"id": check, "comment": reason})
    cfn.add_metadata("checkov", {**metadata, "skip": skips})


# What holds for every resource of a type in this platform, acknowledged on each.
_LAMBDA_ROLE_DEPENDENCY = (
    "aws-cdk-lib makes a function depend on its execution role and the role's "
    "policies, so the policies exist before the function first runs; the role's "
    "GetAtt alone would not wait for them."
)
BY_TYPE: dict[str, tuple[tuple[str, str], ...]] = {
    "AWS::Lambda::Function": (
        ("W3005", _LAMBDA_ROLE_DEPENDENCY),
        (
            "CKV_AWS_116",
            "No function here is invoked asynchronously: API Gateway and CloudFormation "
            "call synchronously, and SQS through an event source mapping whose queue has "
            "its own dead-letter queue; a function DLQ would never receive anything.",
        ),
        (
            "CKV_AWS_117",
            "The functions call only AWS APIs (DynamoDB, SQS, S3, AppConfig) over TLS and "
            "reach nothing inside a VPC; a VPC would add NAT or endpoints and cold-start "
            "cost for no access they need.",
        ),
        (
            "CKV_AWS_173",
            "The environment holds only resource names and limits (the switchyard.settings "
            "contract), no secret; Lambda encrypts it at rest with its service key.",
        ),
    ),
    "AWS::Logs::LogGroup": (
        (
            "CKV_AWS_158",
            "CloudWatch Logs encrypts every log group at rest; these hold request "
            "metadata and errors, not payloads (prediction logs are redacted and go to "
            "S3), so a customer-managed key would add a key policy to run and no control.",
        ),
    ),
    "AWS::SQS::Queue": (
        (
            "CKV_AWS_27",
            "Encrypted at rest with SQS-managed keys (SqsManagedSseEnabled); the check "
            "only recognizes a KMS key. A KMS key would add a kms:Decrypt call per "
            "receive and a key policy for S3's notifications.",
        ),
    ),
    "AWS::DynamoDB::Table": (
        (
            "CKV_AWS_119",
            "Encrypted at rest with the AWS-managed key (aws/dynamodb); a "
            "customer-managed key is an account policy choice, not one this stack makes.",
        ),
    ),
    "AWS::SecretsManager::Secret": (
        (
            "CKV_AWS_149",
            "A tenant's webhook secret is handed to the tenant (it checks callbacks with "
            "it); the AWS-managed key encrypts it at rest, and a customer-managed key "
            "would protect nothing the tenant does not already hold.",
        ),
    ),
    # S3 -> SQS notifications: aws-cdk-lib's SqsDestination makes the notification
    # depend on the queue and its policy; the policy is the part that matters.
    "Custom::S3BucketNotifications": (
        (
            "W3005",
            "aws-cdk-lib's SqsDestination makes the notification depend on its queue and "
            "the queue's policy, so S3 may send before it is first asked to; the "
            "queue's GetAtt alone would not wait for the policy.",
        ),
    ),
}

# aws-cdk-lib's own Lambda handlers (custom resources it adds to a stack), by the
# construct ID it gives each. CloudFormation alone invokes them, during deploys.
CDK_HANDLERS = (
    "Custom::S3AutoDeleteObjectsCustomResourceProvider",
    "Custom::VpcRestrictDefaultSGCustomResourceProvider",
    "BucketNotificationsHandler050a0587b7544547bf325f094a3db834",
)
_CDK_HANDLER_CHECKS = (
    (
        "CKV_AWS_115",
        "aws-cdk-lib's own custom-resource handler: CloudFormation invokes it a few "
        "times per deploy, so reserving concurrency for it would only take it from the "
        "platform's budget.",
    ),
)


@jsii.implements(IAspect)
class LinterAcknowledgments:
    """Writes :data:`BY_TYPE`'s acknowledgments on every resource of those types, and
    :data:`_CDK_HANDLER_CHECKS` on aws-cdk-lib's own handlers."""

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource):
            return
        for rule, reason in BY_TYPE.get(node.cfn_resource_type, ()):
            if rule.startswith("CKV"):
                skip_checkov(node, rule, reason)
            else:
                ignore_cfn_lint(node, rule, reason)
        if node.cfn_resource_type == "AWS::Lambda::Function" and any(
            part in CDK_HANDLERS for part in node.node.path.split("/")
        ):
            for check, reason in _CDK_HANDLER_CHECKS:
                skip_checkov(node, check, reason)
