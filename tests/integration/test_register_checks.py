"""`switchyard models register` loads the artifact in its runtime and runs an example
input made from the signature before the version is active: a model that cannot
load, or whose outputs are not what the manifest declares, is refused in one line
with the runtime's error, and nothing is uploaded or registered."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from botocore.exceptions import ClientError

from stacks.assets import MANIFEST_FILE
from switchyard.manifest import load_manifest
from switchyard.registry import DynamoDBRegistry
from switchyard_cli.main import main
from switchyard_cli.registration import publish_version
from switchyard_local.provision import provision, register_demo_models

MODEL = "digits-cnn"  # a TorchScript classifier: 64 numbers in, 10 labels out
VERSION = "v10"


def scripted(tmp_path: Path, name: str, features: int, classes: int) -> Path:
    path = tmp_path / name
    module = torch.nn.Sequential(torch.nn.Linear(features, classes))
    torch.jit.script(module).save(str(path))
    return path


def left_behind(clients, provisioned, version: str = VERSION, model: str = MODEL) -> list[str]:
    bucket = provisioned.resource_names()["artifacts_bucket"]
    listed = clients("s3").list_objects_v2(Bucket=bucket, Prefix=f"models/{model}/{version}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def refused_with(result: tuple[int, str, str], *words: str) -> str:
    code, _, err = result
    assert code == 2, result
    assert err.startswith("switchyard: ") and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


def test_an_artifact_that_cannot_load_is_refused_and_nothing_is_written(
    cli, clients, provisioned, models_dir, tmp_path
):
    # GIVEN digits-cnn v1's TorchScript file with its pickled module damaged (the
    # zip's layout intact, so only loading it tells)
    corrupt = tmp_path / "model.pt"
    with (
        zipfile.ZipFile(models_dir / MODEL / "v1" / "model.pt") as source,
        zipfile.ZipFile(corrupt, "w") as damaged,
    ):
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename.endswith("/data.pkl"):
                data = b"\x80\x02garbage" + data[10:]
            damaged.writestr(entry, data)
    # WHEN it is registered
    result = cli("models", "register", MODEL, VERSION, "--artifact", str(corrupt))
    # THEN it is refused with torch's own words, and nothing is uploaded or registered
    refused_with(
        result,
        "cannot load in torchscript-classifier: Unknown opcode for unpickling",
        f"{MODEL} {VERSION} was not registered",
    )
    assert left_behind(clients, provisioned) == []
    assert VERSION not in cli("models", "list")[1]


@pytest.mark.parametrize(
    ("features", "classes", "words"),
    [
        # a classifier of 3 classes where the manifest's labels name 10
        (64, 3, ("3 class scores per input", "labels name 10")),
        # a model of 32 features where the signature says 64
        (32, 10, ("fails on an example input", "mat1 and mat2 shapes cannot be multiplied")),
    ],
)
def test_a_model_that_does_not_match_the_signature_is_refused(
    cli, clients, provisioned, tmp_path, features, classes, words
):
    artifact = scripted(tmp_path, "model.pt", features, classes)
    result = cli("models", "register", MODEL, VERSION, "--artifact", str(artifact))
    refused_with(result, *words)
    assert left_behind(clients, provisioned) == []
    assert VERSION not in cli("models", "list")[1]


def test_a_model_that_matches_is_checked_then_registered(cli, clients, provisioned, tmp_path):
    artifact = scripted(tmp_path, "model.pt", 64, 10)
    code, out, err = cli("models", "register", MODEL, VERSION, "--artifact", str(artifact))
    assert code == 0, err
    checked, registered = out.strip().splitlines()
    assert checked == (
        f"checked {MODEL} {VERSION} in torchscript-classifier: 2 example inputs gave 10 "
        "class scores each"
    )
    assert registered.startswith(f"registered {MODEL} {VERSION} sha256:")
    assert left_behind(clients, provisioned) == [f"models/{MODEL}/{VERSION}/model.pt"]


def test_a_generation_model_is_registered_with_its_tokenizer(cli, clients, provisioned, models_dir):
    # The router counts prompt tokens with the tokenizer.json inside the tar.
    artifact = models_dir / "pydoc-gpt" / "v1" / "model.tar"
    code, out, err = cli("models", "register", "pydoc-gpt", VERSION, "--artifact", str(artifact))
    assert code == 0, err
    assert "in causal-lm: a " in out
    table = provisioned.settings_values()["registry_table"]
    record = DynamoDBRegistry(clients("dynamodb"), table).get("pydoc-gpt", VERSION)
    assert record is not None and record.tokenizer_uri is not None
    assert record.tokenizer_uri.endswith(f"/pydoc-gpt/{VERSION}/tokenizer.json")
    assert sorted(left_behind(clients, provisioned, model="pydoc-gpt")) == [
        f"models/pydoc-gpt/{VERSION}/model.tar",
        f"models/pydoc-gpt/{VERSION}/tokenizer.json",
    ]


def test_an_upload_whose_record_cannot_be_written_is_taken_back(
    clients, provisioned, manifest, tmp_path
):
    # GIVEN a registry that refuses the write (a permission, a network failure)
    class RefusingRegistry:
        def register(self, record):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutItem")

    artifact = scripted(tmp_path, "model.pt", 64, 10)
    record = manifest.models[MODEL].version_record(MODEL, VERSION, "s3://-/-", "0" * 64)
    bucket = provisioned.resource_names()["artifacts_bucket"]
    # WHEN the version is published
    with pytest.raises(ClientError):
        publish_version(clients("s3"), bucket, RefusingRegistry(), record, artifact)
    # THEN what was uploaded is deleted
    assert left_behind(clients, provisioned) == []


OWN_MODELS = """
[models.copied-digits]
runtime = "torchscript-classifier"
compute = "cpu"
instance_types = ["c7i.xlarge"]
signature = { kind = "tensor", shape = [64], minimum = 0.0, maximum = 16.0 }
max_inputs_per_request = 8
max_batch_size = 8
max_wait_ms = 5
default_deadline_ms = 3000
slo_p99_ms = 500
demo_versions = ["v1", "v2"]

[models.own-digits]
runtime = "torchscript-classifier"
compute = "cpu"
instance_types = ["c7i.xlarge"]
signature = { kind = "tensor", shape = [64], minimum = 0.0, maximum = 16.0 }
max_inputs_per_request = 8
max_batch_size = 8
max_wait_ms = 5
default_deadline_ms = 3000
slo_p99_ms = 500
"""


def test_a_model_that_is_not_a_demo_starts_and_takes_its_versions_from_register(
    clients, emulator_url, models_dir, tmp_path, capsys
):
    # GIVEN two models of one's own: one entry copied from a demo's with its
    # demo_versions kept (it raised KeyError at start), one without them
    manifest_file = tmp_path / "manifest.toml"
    manifest_file.write_text(MANIFEST_FILE.read_text() + OWN_MODELS)
    provisioned = provision(load_manifest(manifest_file), "dev", emulator_url, "us-east-1")
    # WHEN the platform registers the demo models at start
    registered = {(r.model, r.version) for r in register_demo_models(provisioned, models_dir)}
    # THEN the demo models' versions are registered, and the others are left to
    # `switchyard models register`, which the start-up says
    demos = {m for m, spec in load_manifest(MANIFEST_FILE).models.items() if spec.demo_versions}
    assert {m for m, _ in registered} == demos and MODEL in demos
    said = capsys.readouterr().out
    assert "copied-digits v1: not registered yet; register it with `switchyard models" in said
    # and each has a first routing document with all traffic on v1, as in the cloud
    (tmp_path / "platform.json").write_text(
        json.dumps(
            {"settings": provisioned.settings_values(), "names": provisioned.resource_names()}
        )
    )
    for model in ("copied-digits", "own-digits"):
        where = ("--run-dir", str(tmp_path), "--manifest", str(manifest_file))
        assert main([*where, "traffic", "show", model]) == 0
        assert capsys.readouterr().out.splitlines()[0] == f"{model}: v1=100"
        # and takes a version from `switchyard models register`
        artifact = models_dir / MODEL / "v1" / "model.pt"
        assert main([*where, "models", "register", model, "v1", "--artifact", str(artifact)]) == 0
        assert f"registered {model} v1 sha256:" in capsys.readouterr().out
