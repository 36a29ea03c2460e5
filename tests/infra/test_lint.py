"""cfn-lint on every synthesized template of both stages: no error and no warning.

What cfn-lint flags and cannot be fixed in the stacks is acknowledged on the
resource itself, with its reason (``stacks.nag.ignore_cfn_lint``), so this test
reads the templates exactly as a deploy would send them.
"""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from stacks.deploy_check import cfn_lint_findings
from switchyard.manifest import Manifest

from .conftest import Synthesized


@pytest.mark.parametrize("stage", ["dev", "prod", "pooled_dev", "pooled_prod"])
@pytest.mark.parametrize("stack", ["data", "models", "serving"])
def test_cfn_lint_finds_nothing(
    request: pytest.FixtureRequest, manifest: Manifest, stage: str, stack: str
) -> None:
    # GIVEN a stage's stack, synthesized from the project's manifest (pooled_*: with
    # a pool of three more models)
    synthesized: Synthesized = request.getfixturevalue(stage)
    template: Template = getattr(synthesized, stack)

    # WHEN cfn-lint reads its template
    findings = cfn_lint_findings(template.to_json(), manifest.platform.region)

    # THEN it finds no error and no warning
    assert not findings, f"cfn-lint on {stage}/{stack}:\n" + "\n".join(findings)
