from __future__ import annotations

import pytest

from stacks.assets import MANIFEST_FILE
from switchyard.manifest import load_manifest
from switchyard.registry import ModelVersion

SHA = "0" * 64


@pytest.fixture(scope="session")
def manifest():
    return load_manifest(MANIFEST_FILE)


@pytest.fixture
def digits_v1(manifest) -> ModelVersion:
    return manifest.models["digits-cnn"].version_record(
        "digits-cnn", "v1", "s3://a/m.pt", SHA, created_at=1.0
    )


@pytest.fixture
def digits_v2(manifest) -> ModelVersion:
    return manifest.models["digits-cnn"].version_record(
        "digits-cnn", "v2", "s3://a/m2.pt", SHA, created_at=2.0
    )
