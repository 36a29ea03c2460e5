"""Each tenant's data team drops files with a role of its own: put and read under
its own prefix of the drop bucket and nothing else, trusted by the tenant's account
(the manifest's ``account_id``) or, without one, by the deploying account."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aws_cdk.assertions import Template

from stacks.assets import MANIFEST_FILE
from stacks.nag import logical_id
from switchyard.manifest import Manifest, load_manifest

from .conftest import Synthesized
from .helpers import statements

TENANT_ACCOUNT = "210987654321"


def test_each_tenant_may_put_and_read_under_its_own_prefix_only(
    dev: Synthesized, manifest: Manifest
) -> None:
    template = dev.data
    bucket = logical_id(dev.platform.data.storage.batch_drop_bucket)
    for tenant in manifest.tenants:
        role_name = f"{manifest.names('dev').base}-drop-{tenant}"
        (role,) = template.find_resources(
            "AWS::IAM::Role", {"Properties": {"RoleName": role_name}}
        ).keys()
        # exactly one statement: these actions, on the objects under its prefix
        assert statements(template, role) == [
            {
                "Effect": "Allow",
                "Action": ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"],
                "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{tenant}/*"]]},
            }
        ]


def trust_of(template: Template, role_name: str) -> object:
    (role,) = template.find_resources(
        "AWS::IAM::Role", {"Properties": {"RoleName": role_name}}
    ).values()
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    return statement["Principal"]["AWS"]


def test_a_drop_role_is_trusted_by_the_tenants_account_or_the_deploying_one(
    synth: Callable[[Manifest, str], Synthesized], manifest: Manifest, tmp_path: Path
) -> None:
    # GIVEN acme with an account of its own, globex without one
    text = MANIFEST_FILE.read_text().replace(
        "[tenants.acme]\n", f'[tenants.acme]\naccount_id = "{TENANT_ACCOUNT}"\n', 1
    )
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    # WHEN the data stack is synthesized
    template = synth(load_manifest(path), "dev").data
    base = manifest.names("dev").base
    # THEN acme's role trusts acme's account, and globex's the deploying account
    assert f"arn:aws:iam::{TENANT_ACCOUNT}:root" in str(trust_of(template, f"{base}-drop-acme"))
    assert "AWS::AccountId" in str(trust_of(template, f"{base}-drop-globex"))
