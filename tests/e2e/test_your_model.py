"""docs/your-model.md, followed literally: a model that is not one of the demo models,
made by the page's own Python snippet, added with the page's own manifest entry,
registered, asked and canaried by the page's runnable blocks, answers on the local
platform. The page is the test's input: when it is wrong, this fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

from harness.doc_blocks import run_page, runnable_blocks
from harness.local_platform import ROOT, edit_manifest
from switchyard.manifest import Manifest, ModelSpec
from switchyard.schemas import TensorSignature
from switchyard_cli.registration import check_in_runtime
from tests.e2e.conftest import e2e_manifest, start_platform

PAGE = ROOT / "docs" / "your-model.md"
MODEL = "iris-classifier"
FENCED = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def fenced(language: str) -> list[str]:
    """The page's fenced blocks of ``language``, in order."""
    return [body for lang, body in FENCED.findall(PAGE.read_text()) if lang == language]


def the_entry() -> str:
    """The page's manifest entry of its example model."""
    (entry,) = [b for b in fenced("toml") if b.startswith(f"[models.{MODEL}]")]
    return entry


def the_snippet() -> str:
    """The page's Python snippet that makes the example model's versions."""
    (snippet,) = [b for b in fenced("python") if "load_iris" in b]
    return snippet


def answer(output: str) -> dict:
    """The JSON answer a block's curl printed."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert len(lines) == 1, output
    return json.loads(lines[0])


def test_every_manifest_entry_on_the_page_is_one_the_manifest_takes():
    # GIVEN the repository's manifest and the page's entries (the example's, and
    # those of an embedding and a generative model)
    base = tomllib.loads((ROOT / "manifest.toml").read_text())
    for block in fenced("toml"):
        entries = tomllib.loads(block)["models"]
        # THEN each is a valid model of the manifest, beside the demo models
        manifest = Manifest.model_validate(base | {"models": base["models"] | entries})
        assert set(entries) <= set(manifest.models)


def test_the_pages_onnx_exports_are_models_the_onnx_runtime_serves(tmp_path):
    # GIVEN the page's two ONNX snippets run as a reader runs them: PyTorch's export
    # after a module of the reader's own (4 features, 3 classes), scikit-learn's as
    # it is
    (from_pytorch,) = [b for b in fenced("python") if "torch.onnx.export" in b]
    (from_sklearn,) = [b for b in fenced("python") if "to_onnx" in b]
    a_module = "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(4, 3))\n"
    for code in (a_module + from_pytorch, from_sklearn):
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            check=True,
            timeout=300,
        )
    # WHEN each is checked as `switchyard models register` checks it: the wine
    # model with the page's entry for it, the module with an entry of its shape
    (block,) = [b for b in fenced("toml") if b.startswith("[models.wine-classifier]")]
    wine = ModelSpec.model_validate(tomllib.loads(block)["models"]["wine-classifier"])
    module = wine.model_copy(update={"signature": TensorSignature(shape=(4,)), "labels": ()})
    checked = [
        check_in_runtime(spec.version_record(name, "v1", "s3://-/-", "0" * 64), tmp_path / file)
        for spec, name, file in (
            (wine, "wine-classifier", "wine-v1.onnx"),
            (module, "my-model", "my-model.onnx"),
        )
    ]
    # THEN ONNX Runtime loads both and each answers a batch with 3 class scores a row
    assert checked == ["onnx-classifier: 2 example inputs gave 3 class scores each"] * 2


def test_a_model_of_ones_own_answers_by_following_the_page(tmp_path):
    # GIVEN the page's snippet run in a folder of the reader's (torch, scikit-learn's
    # bundled data: nothing downloaded) ...
    models = tmp_path / "iris"
    models.mkdir()
    subprocess.run(
        [sys.executable, "-c", the_snippet()],
        cwd=models,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
        timeout=300,
    )
    assert sorted(p.name for p in models.iterdir()) == ["iris-v1.pt", "iris-v2.pt"]
    # ... and a platform started with the page's entry (the only model it serves:
    # nothing of the demo models is needed)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    manifest = edit_manifest(e2e_manifest(the_entry()), keep_models={MODEL})
    platform = start_platform(run_dir, manifest, {})
    try:
        # WHEN every runnable block of the page runs, in one shell, from the repository
        ran = run_page(
            PAGE,
            env={
                "MODELS": str(models),
                "SWITCHYARD_RUN_DIR": str(run_dir),
                "SWITCHYARD_MANIFEST": str(run_dir / "manifest.toml"),
                "HF_HUB_OFFLINE": "1",
            },
            cwd=ROOT,
            port=int(platform.url.rsplit(":", 1)[1]),
            timeout_s=300,
        )
    finally:
        platform.stop()
    # (the blocks: PATH; register v1; the first request; a bad one; the canary; v2 pinned)
    outputs = (ran.output[b.line] for b in runnable_blocks(PAGE))
    _, registered, first, refused, canary, pinned = outputs
    # THEN v1 was checked in its runtime, then registered
    assert f"checked {MODEL} v1 in torchscript-classifier: 2 example inputs gave 3 " in registered
    assert f"registered {MODEL} v1 sha256:" in registered
    # and answered the first request: a setosa, by v1
    body = answer(first)
    assert (body["model"], body["version"], body["status"]) == (MODEL, "v1", "done")
    assert body["outputs"][0]["label"] == "setosa"
    # and refused an input of 3 numbers, naming it
    body = answer(refused)
    assert body["code"] == "invalid_input"
    assert body["errors"] == [
        {"field": "inputs[0]", "message": "must hold exactly 4 numbers, got 3"}
    ]
    # and the canary is in force
    assert f"{MODEL}: v1=90 v2=10" in canary.splitlines()
    # and v2, pinned, answers too
    body = answer(pinned)
    assert (body["version"], body["status"]) == ("v2", "done")
    assert body["outputs"][0]["label"] == "virginica"
