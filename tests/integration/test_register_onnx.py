"""ONNX models (``onnx-classifier``) in the registry: the demo's built ``.onnx`` files
are registered at start for the manifest entries that name them, and `switchyard
models register` checks an ``.onnx`` artifact in ONNX Runtime as it checks the other
runtimes' (``switchyard_worker.version_check``): a good one is checked and
registered; a damaged one, or one that is not the entry's model, is refused in one
line and nothing is uploaded or registered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.local_platform import edit_manifest
from stacks.assets import MANIFEST_FILE
from switchyard.manifest import load_manifest
from switchyard.registry import DynamoDBRegistry
from switchyard_cli.main import main
from switchyard_local.provision import Provisioned, provision, register_demo_models

# Two of the repository's ONNX models, one from each pool: the manifest cut down to
# them (and their pools), so that start-up registers no other model's artifact.
ONNX_MODELS = ("digits-cnn-onnx", "iris-logreg")
MODEL = "iris-logreg"  # 4 measurements in, 3 species out


@pytest.fixture
def with_onnx(clients, emulator_url, tmp_path) -> tuple[Provisioned, list[str]]:
    """A platform provisioned from the repository's manifest cut down to two ONNX
    models; the CLI's arguments to reach it."""
    manifest_file = tmp_path / "manifest.toml"
    manifest_file.write_text(edit_manifest(MANIFEST_FILE.read_text(), set(ONNX_MODELS)))
    provisioned = provision(load_manifest(manifest_file), "dev", emulator_url, "us-east-1")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {"settings": provisioned.settings_values(), "names": provisioned.resource_names()}
    (run_dir / "platform.json").write_text(json.dumps(record))
    return provisioned, ["--run-dir", str(run_dir), "--manifest", str(manifest_file)]


def stored(clients, provisioned: Provisioned, model: str, version: str) -> list[str]:
    bucket = provisioned.resource_names()["artifacts_bucket"]
    listed = clients("s3").list_objects_v2(Bucket=bucket, Prefix=f"models/{model}/{version}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def register(where: list[str], capsys, model: str, version: str, artifact: Path):
    capsys.readouterr()
    code = main([*where, "models", "register", model, version, "--artifact", str(artifact)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_built_onnx_models_are_registered_at_start(clients, with_onnx, models_dir):
    provisioned, _ = with_onnx
    # WHEN the platform registers the demo models at start
    registered = {(r.model, r.version): r for r in register_demo_models(provisioned, models_dir)}
    # THEN the ONNX entries' versions are registered from what make models built
    for model in ONNX_MODELS:
        record = registered[(model, "v1")]
        assert record.runtime == "onnx-classifier"
        assert record.artifact_uri.endswith(f"/models/{model}/v1/model.onnx")
        assert stored(clients, provisioned, model, "v1") == [f"models/{model}/v1/model.onnx"]


def test_a_good_onnx_model_is_checked_then_registered(clients, with_onnx, models_dir, capsys):
    provisioned, where = with_onnx
    # GIVEN the iris classifier that make models converted with skl2onnx
    artifact = models_dir / MODEL / "v1" / "model.onnx"
    # WHEN it is registered as a new version
    code, out, err = register(where, capsys, MODEL, "v7", artifact)
    # THEN it was run in ONNX Runtime first, then uploaded and recorded
    assert code == 0, err
    checked, registered = out.strip().splitlines()
    assert checked == (
        f"checked {MODEL} v7 in onnx-classifier: 2 example inputs gave 3 class scores each"
    )
    assert registered.startswith(f"registered {MODEL} v7 sha256:")
    assert stored(clients, provisioned, MODEL, "v7") == [f"models/{MODEL}/v7/model.onnx"]
    table = provisioned.settings_values()["registry_table"]
    record = DynamoDBRegistry(clients("dynamodb"), table).get(MODEL, "v7")
    assert record is not None and record.runtime == "onnx-classifier"


def _truncated(models_dir: Path, tmp_path: Path) -> Path:
    data = (models_dir / MODEL / "v1" / "model.onnx").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    return path


def _unknown_operator(models_dir: Path, tmp_path: Path) -> Path:
    # its protobuf intact (one name changed for another of the same length), its
    # graph naming an operator no runtime has
    data = (models_dir / MODEL / "v1" / "model.onnx").read_bytes()
    assert b"LinearClassifier" in data
    path = tmp_path / "unknown-operator.onnx"
    path.write_bytes(data.replace(b"LinearClassifier", b"LinearClassifiex"))
    return path


def _another_models(models_dir: Path, tmp_path: Path) -> Path:
    return models_dir / "wine-forest" / "v1" / "model.onnx"  # 13 features, not 4


def _torchscript(models_dir: Path, tmp_path: Path) -> Path:
    return models_dir / "digits-cnn" / "v1" / "model.pt"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_truncated, ("not an ONNX model", f"{MODEL} runs onnx-classifier")),
        (_torchscript, ("not an ONNX model", f"{MODEL} runs onnx-classifier")),
        (
            _unknown_operator,
            ("cannot load in onnx-classifier: [ONNXRuntimeError]", "INVALID_GRAPH"),
        ),
        (
            _another_models,
            ("fails on an example input (2 vectors of 4 numbers)", "INVALID_ARGUMENT"),
        ),
    ],
    ids=["truncated", "torchscript", "unknown-operator", "another-models"],
)
def test_an_onnx_artifact_that_cannot_serve_is_refused_and_nothing_is_written(
    clients, with_onnx, models_dir, tmp_path, capsys, make, words
):
    provisioned, where = with_onnx
    # GIVEN an artifact that is not a working iris-logreg
    artifact = make(models_dir, tmp_path)
    # WHEN it is registered
    code, out, err = register(where, capsys, MODEL, "v8", artifact)
    # THEN it is refused in one line that says why, and nothing is written
    assert code == 2, (out, err)
    assert err.startswith("switchyard: ") and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    assert stored(clients, provisioned, MODEL, "v8") == []
    capsys.readouterr()
    assert main([*where, "models", "list"]) == 0
    assert f"{MODEL}\tv8" not in capsys.readouterr().out
