"""The demo's classifiers trained at setup on scikit-learn's data sets, loaded through
the worker's ``load_runtime`` as a worker loads them. The ONNX runtime
(``onnx-classifier``): the ONNX models answer as the models they were made from:
digits-cnn's ONNX export as the TorchScript digits-cnn, the scikit-learn classifiers
about as well as they scored when built, and a batch as its inputs one by one; a
graph that cannot answer in the classifier's shape is refused at load. The
TorchScript networks (``torchscript-classifier``) read their held-out data as well."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness import MODELS_DIR
from switchyard.manifest import Manifest, ModelSpec
from switchyard_local.models import (
    SKLEARN_DEMOS,
    TABULAR_MLPS,
    build_all,
    built_artifact,
    data_set_split,
)
from switchyard_worker.model_cache import ProcessMeter
from switchyard_worker.runtimes import ModelRuntime, OnnxClassifier, load_runtime
from tests.devices import DEVICES

ONNX_MODELS = ["digits-cnn-onnx", *SKLEARN_DEMOS]
# Each data set's loader (a function of sklearn.datasets), by model.
DATA_SETS = {
    **{model: loader for model, (loader, _) in SKLEARN_DEMOS.items()},
    **{model: loader for model, (loader, _) in TABULAR_MLPS.items()},
}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_all(MODELS_DIR)  # the demo artifacts, built where missing (make models)


@pytest.fixture(scope="module")
def entries(manifest: Manifest) -> dict[str, ModelSpec]:
    """The demo models' entries in the repository's manifest."""
    return dict(manifest.models)


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
    onnx = load(manifest.models["digits-cnn-onnx"], "digits-cnn-onnx", tmp_path, device)
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


@pytest.mark.parametrize("model", sorted(DATA_SETS))
def test_a_classifier_trained_on_a_scikit_learn_data_set_reads_its_held_out_data(
    model, entries, tmp_path
):
    # GIVEN a classifier trained at setup (a scikit-learn one converted with
    # skl2onnx, or a torch network scripted), loaded by the worker as its entry says
    spec = entries[model]
    runtime_name = "onnx-classifier" if model in SKLEARN_DEMOS else "torchscript-classifier"
    assert spec.runtime == runtime_name
    runtime = load(spec, model, tmp_path)
    # WHEN it answers the fifth of its data set it was not fitted on
    _, features, _, truth = data_set_split(DATA_SETS[model])
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
def test_a_batch_answers_as_its_inputs_one_by_one(model, entries, tmp_path):
    # GIVEN an ONNX model and 17 inputs of its data set
    runtime = load(entries[model], model, tmp_path)
    inputs = data_set_split(DATA_SETS.get(model, "load_digits"))[1][:17].tolist()
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


def test_the_manifest_serves_every_built_classifier_from_a_pool_with_its_recorded_labels(
    manifest,
):
    # GIVEN the repository's manifest and what make models recorded of each build
    for model in [*ONNX_MODELS, *TABULAR_MLPS]:
        spec = manifest.models[model]
        # THEN each classifier is served from a pool, from the version make models
        # built, its labels those its build recorded
        assert spec.pool is not None
        assert spec.demo_versions == ("v1",)
        assert built_artifact(MODELS_DIR, model, "v1") is not None
        if model in DATA_SETS:
            record = json.loads((MODELS_DIR / model / "v1" / "build.json").read_text())
            assert list(spec.labels) == record["labels"]
            assert tuple(spec.signature.shape) == (record["features"],)


def test_an_onnx_sessions_footprint_is_never_under_its_graph_files_bytes(entries, tmp_path):
    # GIVEN digits-mlp (ONNX, two layers of 2048: its graph file is nearly all weights)
    runtime = load(entries["digits-mlp"], "digits-mlp", tmp_path)
    size = built_artifact(MODELS_DIR, "digits-mlp", "v1").stat().st_size  # type: ignore[union-attr]
    # WHEN the worker's meter takes the least it holds
    floor = ProcessMeter().floor(runtime)
    # THEN that is the file's bytes on the host, whatever the resident memory says
    # after a load that reused an evicted version's heap pages
    assert floor.host_mib == pytest.approx(size / (1 << 20)) and floor.host_mib > 16
    assert floor.device_mib == 0
