"""The drop bucket: versioned, and what tenants leave there expires per tenant."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest


def _drop_bucket(manifest: Manifest, stage: str) -> dict[str, object]:
    name = manifest.names(stage).batch_drop_bucket
    return {"BucketName": {"Fn::Join": ["", Match.array_with([f"{name}-"])]}}


def test_drop_bucket_is_versioned(data_template: Template, manifest: Manifest) -> None:
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {**_drop_bucket(manifest, "dev"), "VersioningConfiguration": {"Status": "Enabled"}},
    )


def test_each_tenant_prefix_expires_after_its_retention(
    data_template: Template, manifest: Manifest
) -> None:
    for tenant in manifest.tenants:
        data_template.has_resource_properties(
            "AWS::S3::Bucket",
            {
                **_drop_bucket(manifest, "dev"),
                "LifecycleConfiguration": {
                    "Rules": Match.array_with(
                        [
                            {
                                "Id": f"tenant-{tenant}",
                                "Prefix": f"{tenant}/",
                                "ExpirationInDays": manifest.drop_retention_days(tenant, "dev"),
                                "Status": "Enabled",
                            }
                        ]
                    )
                },
            },
        )


def test_a_tenant_retention_overrides_the_stage(
    prod_data_template: Template, manifest: Manifest
) -> None:
    # acme keeps its files longer than the stage's default (manifest.toml)
    own = manifest.tenants["acme"].drop_retention_days
    assert own is not None and own != manifest.stages["prod"].drop.retention_days
    prod_data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            **_drop_bucket(manifest, "prod"),
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [Match.object_like({"Prefix": "acme/", "ExpirationInDays": own})]
                )
            },
        },
    )


def test_replaced_versions_and_unfinished_uploads_are_cleaned_up(
    data_template: Template, manifest: Manifest
) -> None:
    drop = manifest.stages["dev"].drop
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            **_drop_bucket(manifest, "dev"),
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        {
                            "Id": "replaced-and-unfinished",
                            "NoncurrentVersionExpiration": {"NoncurrentDays": drop.noncurrent_days},
                            "AbortIncompleteMultipartUpload": {
                                "DaysAfterInitiation": drop.incomplete_upload_days
                            },
                            "ExpiredObjectDeleteMarker": True,
                            "Status": "Enabled",
                        }
                    ]
                )
            },
        },
    )
