"""The ONNX runtime (``onnx-classifier``): the demo's ONNX models, loaded through the
worker's ``load_runtime`` as a worker loads them, answer as the models they were
made from: digits-cnn's ONNX export as the TorchScript digits-cnn, the scikit-learn
classifiers about as well as they scored when built, and a batch as its inputs one
by one. A graph that cannot answer in the classifier's shape is refused at load."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from harness import MODELS_DIR, ROOT
from switchyard.manifest import Manifest, ModelSpec
from switchyard_local.models import SKLEARN_DEMOS, build_all, built_artifact, data_set_split
from switchyard_worker.runtimes import ModelRuntime, OnnxClassifier, load_runtime
from tests.devices import DEVICES

ENTRIES_FILE = ROOT / "tests" / "onnx_demo_models.toml"
ONNX_MODELS = ["digits-cnn-onnx", *SKLEARN_DEMOS]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_all(MODELS_DIR)  # the demo artifacts, built where missing (make models)


def entry(model: str) -> ModelSpec:
    """An ONNX demo model's manifest entry (``tests/onnx_demo_models.toml``)."""
    entries = tomllib.loads(ENTRIES_FILE.read_text())["models"]
    return ModelSpec.model_validate(entries[model])


def load(spec: ModelSpec, model: str, tmp_path: Path, device: str = "cpu") -> ModelRuntime:
    """``model`` v1 as a worker loads it: its record from ``spec``, its built file."""
    artifact = built_artifact(MODELS_DIR, model, "v1")
    assert artifact is not None, f"{model} v1 is not built"
    record = spec.version_record(model, "v1", f"s3://artifacts/{artifact.name}", "0" * 64)
    return load_runtime(record, artifact, tmp_path, device)


def in_batches(runtime: ModelRuntime, inputs: list[Any], size: int = 64) -> list[Any]:
    """``inputs`` answered in batches of ``size``, as a worker forms them."""
    answers: list[Any] = []
    for start in range(0, len(inputs), size):
        answers.extend(runtime.predict(inputs[start : start + size]))
    return answers


@pytest.mark.parametrize("device", DEVICES)
def test_the_onnx_export_of_digits_cnn_answers_the_classes_torchscript_does(
    device, manifest, tmp_path
):
    # GIVEN digits-cnn v1 in TorchScript and the same weights exported to ONNX, each
    # loaded by the worker's runtimes (the ONNX one on the device)
    torchscript = load(manifest.models["digits-cnn"], "digits-cnn", tmp_path)
    onnx = load(entry("digits-cnn-onnx"), "digits-cnn-onnx", tmp_path, device)
    # WHEN both read the digits that digits-cnn never saw in training
    _, images, _, truth = data_set_split("load_digits")
    from_torchscript = in_batches(torchscript, images.tolist())
    from_onnx = in_batches(onnx, images.tolist())
    # THEN they answer the same class for at least 99 % of them, with the same
    # probabilities near enough, and as well as digits-cnn reads them
    same = sum(a["class"] == b["class"] for a, b in zip(from_onnx, from_torchscript, strict=True))
    assert same / len(images) >= 0.99
    for mine, theirs in zip(from_onnx, from_torchscript, strict=True):
        assert mine["label"] == str(mine["class"])
        assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-4)
    right = sum(a["class"] == t for a, t in zip(from_onnx, truth.tolist(), strict=True))
    assert right / len(images) > 0.95


@pytest.mark.parametrize("model", sorted(SKLEARN_DEMOS))
def test_a_scikit_learn_model_reads_its_held_out_data(model, tmp_path):
    # GIVEN a scikit-learn classifier converted with skl2onnx, loaded by the worker
    spec = entry(model)
    runtime = load(spec, model, tmp_path)
    # WHEN it answers the fifth of its data set it was not fitted on
    loader, _ = SKLEARN_DEMOS[model]
    _, features, _, truth = data_set_split(loader)
    answers = in_batches(runtime, features.tolist())
    # THEN most answers are right, each labelled by the entry's labels, each a
    # probability per label that sums to 1
    right = sum(a["class"] == t for a, t in zip(answers, truth.tolist(), strict=True))
    assert right / len(truth) >= 0.9
    for answer in answers:
        assert answer["label"] == spec.labels[answer["class"]]
        assert len(answer["probabilities"]) == len(spec.labels)
        assert math.isclose(sum(answer["probabilities"]), 1, abs_tol=1e-5)
        assert max(answer["probabilities"]) == answer["probabilities"][answer["class"]]


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_a_batch_answers_as_its_inputs_one_by_one(model, tmp_path):
    # GIVEN an ONNX model and 17 inputs of its data set
    runtime = load(entry(model), model, tmp_path)
    loader = SKLEARN_DEMOS.get(model, ("load_digits", ""))[0]
    inputs = data_set_split(loader)[1][:17].tolist()
    # WHEN they run as one batch (one session.run), and then each alone
    together = runtime.predict(inputs)
    alone = [runtime.predict([one])[0] for one in inputs]
    # THEN each input's answer is the same either way
    assert len(together) == len(inputs)
    for batched, single in zip(together, alone, strict=True):
        assert batched["class"] == single["class"]
        assert batched["label"] == single["label"]
        assert batched["probabilities"] == pytest.approx(single["probabilities"], abs=1e-5)


def test_a_scikit_learn_model_converted_with_its_list_of_maps_is_refused(tmp_path):
    # GIVEN a classifier converted with skl2onnx's defaults: its probabilities are a
    # list of {class: probability} maps, not a tensor [n, classes]
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    x_train, _, y_train, _ = data_set_split("load_iris")
    artifact = tmp_path / "zipmap.onnx"
    fitted = LogisticRegression(max_iter=1000).fit(x_train, y_train)
    artifact.write_bytes(to_onnx(fitted, x_train[:1]).SerializeToString())
    # WHEN it loads THEN it is refused, saying how to convert it
    with pytest.raises(ValueError, match=r"not class scores \[n, classes\].*'zipmap': False"):
        OnnxClassifier(artifact, ("setosa", "versicolor", "virginica"))


def test_cuda_without_onnx_runtimes_cuda_provider_fails_the_load():
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has its CUDA provider")
    # GIVEN ONNX Runtime's CPU build (onnxruntime, not onnxruntime-gpu)
    artifact = built_artifact(MODELS_DIR, "digits-cnn-onnx", "v1")
    assert artifact is not None
    # WHEN a model is loaded on cuda THEN the load fails rather than run on the CPU
    with pytest.raises(RuntimeError, match="no CUDA provider here.*onnxruntime-gpu"):
        OnnxClassifier(artifact, (), "cuda")


def test_the_entries_to_paste_are_ones_the_manifest_takes_with_the_concurrency_they_say():
    # GIVEN the repository's manifest, the ONNX demo models' entries, and the
    # concurrency their file's header asks for
    base = tomllib.loads((ROOT / "manifest.toml").read_text())
    entries = tomllib.loads(ENTRIES_FILE.read_text())["models"]
    header = ENTRIES_FILE.read_text().split("\n\n", 1)[0]
    assert "`predict` to 72 in both stages" in header and "`openai` to 120" in header
    pasted = copy.deepcopy(base)
    pasted["models"] = base["models"] | entries
    for stage in ("dev", "prod"):
        pasted["stages"][stage]["concurrency"]["predict"] = 72
    pasted["stages"]["prod"]["concurrency"]["openai"] = 120
    # WHEN they are pasted in THEN the manifest takes them, each an onnx-classifier
    # of a model that make models builds, its labels those its build recorded
    manifest = Manifest.model_validate(pasted)
    for model in entries:
        assert manifest.models[model].runtime == "onnx-classifier"
        assert manifest.models[model].demo_versions == ("v1",)
        assert built_artifact(MODELS_DIR, model, "v1") is not None
    for model in SKLEARN_DEMOS:
        record = json.loads((MODELS_DIR / model / "v1" / "build.json").read_text())
        assert list(manifest.models[model].labels) == record["labels"]
