from __future__ import annotations

import pytest

from switchyard.manifest import load_manifest
from switchyard.registry import ModelVersion

SHA = "0" * 64


@pytest.fixture(scope="session")
def manifest():
    return load_manifest()


@pytest.fixture
def digits_v1(manifest) -> ModelVersion:
    return ModelVersion.from_spec(
        "digits-cnn", "v1", manifest.models["digits-cnn"], "s3://a/m.pt", SHA, created_at=1.0
    )


@pytest.fixture
def digits_v2(manifest) -> ModelVersion:
    return ModelVersion.from_spec(
        "digits-cnn", "v2", manifest.models["digits-cnn"], "s3://a/m2.pt", SHA, created_at=2.0
    )
