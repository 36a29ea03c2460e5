"""cdk-nag AwsSolutions: no unacknowledged finding, and every acknowledgment says why.

cdk-nag 3 runs as a CDK validation plugin (app.py registers it, so a finding fails
``cdk synth``); here the same pack checks each synthesized stack.
"""

from __future__ import annotations

import pytest
from aws_cdk import Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from .conftest import Synthesized


def _findings(synthesized: Synthesized, stack: Stack) -> list[str]:
    report = AwsSolutionsChecks(synthesized.app).validate_scope(stack)
    return [
        f"{v.rule_name} at {[r.construct_path for r in v.violating_resources]}"
        for v in report.violations
    ]


@pytest.mark.parametrize("stage", ["dev", "prod", "pooled_dev", "pooled_prod"])
@pytest.mark.parametrize("stack", ["data", "models", "serving"])
def test_no_unacknowledged_findings(request: pytest.FixtureRequest, stage: str, stack: str) -> None:
    synthesized: Synthesized = request.getfixturevalue(stage)
    assert _findings(synthesized, getattr(synthesized.platform, stack)) == []


def _acknowledgments(root: IConstruct) -> list[tuple[str, str, str]]:
    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found = []
    for construct in root.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:  # {rule id: reason}
                found.extend((construct.node.path, rule, why) for rule, why in entry.data.items())
    return found


def test_every_acknowledgment_has_a_written_reason(dev: Synthesized) -> None:
    acks = _acknowledgments(dev.app)
    assert acks, "no acknowledgments were recorded"
    for path, rule, reason in acks:
        assert len(reason.split()) >= 8, f"{rule} at {path}: reason too thin: {reason!r}"
