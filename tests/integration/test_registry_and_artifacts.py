from __future__ import annotations

from pathlib import Path

import pytest

from switchyard import artifacts
from switchyard.artifacts import ArtifactMismatch, fetch_artifact, sha256_file, split_s3_uri
from switchyard.registry import DynamoDBRegistry, VersionExists
from switchyard_local.provision import register_demo_models


def test_demo_models_are_uploaded_and_registered_with_their_sha256(
    manifest, provisioned, clients, models_dir
):
    records = register_demo_models(provisioned, models_dir)
    # every demo version the manifest lists, pooled models' too
    assert {(r.model, r.version) for r in records} == {
        (model, version)
        for model, spec in manifest.models.items()
        for version in spec.demo_versions
    }
    assert {("digits-cnn", "v2"), ("wine-mlp", "v1"), ("digits-mlp", "v1")} <= {
        (r.model, r.version) for r in records
    }
    registry = DynamoDBRegistry(clients("dynamodb"), manifest.names("dev").registry_table)
    stored = registry.get("digits-cnn", "v2")
    assert stored is not None
    assert stored.sha256 == sha256_file(models_dir / "digits-cnn" / "v2" / "model.pt")
    assert stored.max_batch_size == manifest.models["digits-cnn"].max_batch_size
    assert stored.tokenizer_uri is None
    # a generation model's version names its tokenizer too, checked like its artifact
    gpt = registry.get("pydoc-gpt", "v1")
    assert gpt is not None and gpt.tokenizer_uri and gpt.tokenizer_uri.endswith("/tokenizer.json")
    assert gpt.tokenizer_sha256 == sha256_file(models_dir / "pydoc-gpt" / "v1" / "tokenizer.json")


def test_a_version_record_cannot_be_overwritten(manifest, provisioned, clients, models_dir):
    register_demo_models(provisioned, models_dir)
    registry = DynamoDBRegistry(clients("dynamodb"), manifest.names("dev").registry_table)
    original = registry.get("digits-cnn", "v1")
    forged = original.model_copy(update={"sha256": "f" * 64})
    with pytest.raises(VersionExists):
        registry.register(forged)
    assert registry.get("digits-cnn", "v1").sha256 == original.sha256


def test_artifacts_are_checked_against_the_registry_before_use(
    manifest, provisioned, clients, models_dir, tmp_path
):
    register_demo_models(provisioned, models_dir)
    registry = DynamoDBRegistry(clients("dynamodb"), manifest.names("dev").registry_table)
    record = registry.get("digits-cnn", "v1")
    s3 = clients("s3")
    good = fetch_artifact(s3, record.artifact_uri, record.sha256, tmp_path / "cache")
    assert sha256_file(good) == record.sha256

    bucket, key = split_s3_uri(record.artifact_uri)
    s3.put_object(Bucket=bucket, Key=key, Body=b"tampered weights")
    with pytest.raises(ArtifactMismatch, match="refusing to load"):
        fetch_artifact(s3, record.artifact_uri, record.sha256, tmp_path / "fresh-cache")
    assert not any((tmp_path / "fresh-cache").rglob("model.pt"))  # nothing left behind


def test_a_cached_artifact_is_rehashed_only_when_it_changed(
    manifest, provisioned, clients, models_dir, tmp_path, monkeypatch
):
    register_demo_models(provisioned, models_dir)
    registry = DynamoDBRegistry(clients("dynamodb"), manifest.names("dev").registry_table)
    record = registry.get("digits-cnn", "v1")
    s3 = clients("s3")
    cache = tmp_path / "cache"
    first = fetch_artifact(s3, record.artifact_uri, record.sha256, cache)

    # GIVEN a verified copy in the cache, WHEN it is fetched again, THEN it is not re-read
    hashed: list[Path] = []
    real_hash = artifacts.sha256_file
    monkeypatch.setattr(artifacts, "sha256_file", lambda p: hashed.append(p) or real_hash(p))
    assert fetch_artifact(s3, record.artifact_uri, record.sha256, cache) == first
    assert hashed == []

    # WHEN the cached bytes change, THEN they are hashed, refused and downloaded again
    first.write_bytes(b"changed on disk")
    again = fetch_artifact(s3, record.artifact_uri, record.sha256, cache)
    assert hashed and real_hash(again) == record.sha256
