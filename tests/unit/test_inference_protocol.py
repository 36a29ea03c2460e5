"""The Open Inference Protocol v2 on in-memory stores: tensors to and from the
platform's inputs and outputs (shapes, datatypes, BYTES, binary data), and every
refusal in the protocol's shape with its status (the e2e tier repeats the main
cases with the official tritonclient)."""

from __future__ import annotations

import json
import struct
import time

import pytest

from harness.fakes import (
    FakeQueue,
    FakeResults,
    answered,
    version_record,
)
from harness.router_app import predict_service, router_client
from switchyard.queues import ModelLanes
from switchyard.schemas import QueueMessage, TensorSignature, TextSignature
from switchyard_router.logic import RequestRejected
from switchyard_router.oip import read_infer
from switchyard_router.tensors import (
    TensorFault,
    decode_binary,
    decode_json,
    encode_binary,
    output_specs,
    output_tensors,
    platform_field,
    platform_inputs,
)

KEYS = {"k-acme": "acme"}
KEY = {"x-api-key": "k-acme"}
DIGITS = TensorSignature(shape=(64,), minimum=0.0, maximum=16.0)
TEXT = TextSignature(max_chars=100)


# -- tensors -------------------------------------------------------------------------


def test_a_nested_fp32_tensor_becomes_one_row_per_input():
    # GIVEN a [2, 64] tensor in JSON, nested by rows
    rows = [[float(i % 17)] * 64 for i in range(2)]
    tensor = decode_json("input", "FP32", (2, 64), rows, "inputs[0]")
    # WHEN it is read as a digits model's inputs
    inputs = platform_inputs(tensor, DIGITS)
    # THEN there is one row of 64 per input
    assert inputs == rows


def test_int64_elements_become_floats_and_a_wrong_shape_is_named():
    tensor = decode_json("input", "INT64", (1, 64), [3] * 64, "inputs[0]")
    assert platform_inputs(tensor, DIGITS) == [[3.0] * 64]
    flat = decode_json("input", "FP32", (64,), [0.0] * 64, "inputs[0]")
    with pytest.raises(TensorFault) as fault:
        platform_inputs(flat, DIGITS)
    assert fault.value.error.field == "input.shape"
    assert "[n, 64]" in fault.value.error.message


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "field", "said"),
    [
        ("FP32", (1, 3), [1.0, 2.0], "inputs[0].data", "holds 2 elements; shape [1, 3] needs 3"),
        ("FP32", (1, 2), [1.0, "x"], "inputs[0].data[1]", "must be a number"),
        ("INT64", (2,), [1, 2.5], "inputs[0].data[1]", "must be an integer"),
        ("FP32", (2,), [True, 1.0], "inputs[0].data[0]", "must be a number"),
        ("BYTES", (2,), ["a", 3], "inputs[0].data[1]", "must be a string"),
        ("FP32", (1,), "nope", "inputs[0].data", "must be a list"),
    ],
)
def test_json_elements_are_checked_against_shape_and_datatype(datatype, shape, data, field, said):
    with pytest.raises(TensorFault) as fault:
        decode_json("t", datatype, shape, data, "inputs[0]")
    assert fault.value.error.field == field
    assert said in fault.value.error.message


def test_binary_numbers_and_bytes_round_trip():
    # GIVEN raw little-endian tensors, as tritonclient writes them
    fp32 = struct.pack("<4f", 0.5, 1.0, 2.0, 16.0)
    int64 = struct.pack("<3q", -1, 0, 7)
    texts = encode_binary("BYTES", ["héllo", ""])
    # WHEN they are decoded
    # THEN the elements come back, BYTES as each element's bytes
    assert decode_binary("a", "FP32", (1, 4), fp32, "inputs[0]").elements == [0.5, 1.0, 2.0, 16.0]
    assert decode_binary("b", "INT64", (3,), int64, "inputs[0]").elements == [-1, 0, 7]
    assert decode_binary("c", "BYTES", (2,), texts, "inputs[0]").elements == ["héllo".encode(), b""]
    assert texts == b"\x06\x00\x00\x00h\xc3\xa9llo\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("datatype", "shape", "raw", "said"),
    [
        ("FP32", (1, 2), b"\x00" * 7, "is 7 bytes; shape [1, 2] of FP32 needs 8"),
        ("BYTES", (1,), b"\x05\x00\x00\x00ab", "element 0 is cut short"),
        ("BYTES", (2,), b"\x01\x00\x00\x00a", "holds 1 BYTES elements; the shape needs 2"),
        ("BYTES", (1,), b"\x01\x00", "element 0's length is cut short"),
    ],
)
def test_binary_data_of_the_wrong_size_is_refused(datatype, shape, raw, said):
    with pytest.raises(TensorFault) as fault:
        decode_binary("t", datatype, shape, raw, "inputs[0]")
    assert fault.value.error.field == "inputs[0].parameters.binary_data_size"
    assert said in fault.value.error.message


def test_a_non_finite_binary_float_is_refused():
    with pytest.raises(TensorFault) as fault:
        decode_binary("t", "FP32", (2,), struct.pack("<2f", 1.0, float("nan")), "inputs[0]")
    assert fault.value.error.field == "inputs[0][1]"


def test_text_takes_n_or_n_by_one_and_refuses_what_is_not_utf8():
    tensor = decode_json("text", "BYTES", (2, 1), [["a"], ["b"]], "inputs[0]")
    assert platform_inputs(tensor, TEXT) == ["a", "b"]
    broken = decode_binary("text", "BYTES", (1,), b"\x01\x00\x00\x00\xff", "inputs[0]")
    with pytest.raises(TensorFault) as fault:
        platform_inputs(broken, TEXT)
    assert fault.value.error.field == "text[0]"


def test_a_generation_takes_its_settings_from_the_parameters(manifest):
    signature = manifest.models["pydoc-gpt"].signature
    tensor = decode_json("text_input", "BYTES", (1,), ["def f"], "inputs[0]")
    inputs = platform_inputs(tensor, signature, {"max_tokens": 4, "binary_data_output": True})
    assert inputs == [{"prompt": "def f", "max_tokens": 4}]
    assert (
        platform_field("inputs[0].max_tokens", "text_input", signature) == "parameters.max_tokens"
    )
    assert platform_field("inputs[0].prompt", "text_input", signature) == "text_input[0]"
    assert platform_field("inputs[2][5]", "input", DIGITS) == "input[2][5]"


def test_outputs_as_json_and_as_raw_bytes():
    # GIVEN a classifier's answers for two inputs
    answers = [
        {"class": 3, "label": "3", "probabilities": [0.25, 0.75]},
        {"class": 0, "label": "0", "probabilities": [1.0, 0.0]},
    ]
    specs = output_specs(DIGITS, ("0", "1"))
    # WHEN probabilities are asked raw and the label as JSON
    probabilities, label = output_tensors(specs, answers, {"probabilities": True, "label": False})
    # THEN the raw tensor is [2, 2] FP32 with its size, the JSON one [2] BYTES
    assert probabilities.metadata == {
        "name": "probabilities",
        "datatype": "FP32",
        "shape": [2, 2],
        "parameters": {"binary_data_size": 16},
    }
    assert struct.unpack("<4f", probabilities.raw) == (0.25, 0.75, 1.0, 0.0)
    assert label.metadata == {
        "name": "label",
        "datatype": "BYTES",
        "shape": [2],
        "data": ["3", "0"],
    }


# -- the body ------------------------------------------------------------------------


def test_binary_inputs_follow_the_json_header_in_order():
    header = json.dumps(
        {"inputs": [{"name": "input", "shape": [1, 2], "datatype": "FP32",
                     "parameters": {"binary_data_size": 8}}]}
    ).encode()  # fmt: skip
    raw = struct.pack("<2f", 1.0, 2.0)
    request = read_infer(header + raw, str(len(header)))
    assert request.raw == [raw]
    with pytest.raises(RequestRejected) as extra:
        read_infer(header + raw + b"x", str(len(header)))
    assert extra.value.errors[0].field == "body"
    with pytest.raises(RequestRejected) as short:
        read_infer(header + raw[:4], str(len(header)))
    assert short.value.errors[0].field == "inputs[0].parameters.binary_data_size"


# -- the routes ----------------------------------------------------------------------


class ClassifyingQueue(FakeQueue):
    """Answers each message at once as a two-class classifier would."""

    def __init__(self, results: FakeResults) -> None:
        super().__init__("realtime")
        self.results = results

    def send(self, body: str, group: str) -> None:
        super().send(body, group)
        m = QueueMessage.model_validate_json(body)
        answer = {"class": 1, "label": "1", "probabilities": [0.25, 0.75]}
        self.results.complete(answered(m, answer, received_at=time.time(), compute_ms=1.0))


@pytest.fixture
def client(digits_v1, digits_v2):
    results = FakeResults()
    queue = ClassifyingQueue(results)
    lanes = {"digits-cnn": ModelLanes(realtime=queue, batch=FakeQueue("batch"))}
    service = predict_service(lanes, digits_v1, digits_v2, results=results)
    return router_client(service, KEYS), queue


def image(rows: int = 1) -> dict:
    return {"name": "input", "shape": [rows, 64], "datatype": "FP32", "data": [1.0] * 64 * rows}


def test_metadata_names_tensors_versions_and_platform(client):
    http, _ = client
    meta = http.get("/v2/models/digits-cnn", headers=KEY)
    assert meta.status_code == 200
    assert meta.json() == {
        "name": "digits-cnn",
        "versions": ["v1", "v2"],
        "platform": "pytorch_libtorch",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [
            {"name": "class", "datatype": "INT64", "shape": [-1]},
            {"name": "label", "datatype": "BYTES", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
        ],
    }
    assert http.get("/v2/models/digits-cnn/versions/v1/ready", headers=KEY).status_code == 200
    assert http.get("/v2/health/ready", headers=KEY).json() == {"ready": True}


def test_infer_pinned_to_a_version_answers_json_and_binary(client):
    http, queue = client
    # WHEN two images are sent to v1, probabilities asked as raw bytes
    body = {"id": "r-1", "inputs": [image(2)],
            "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}},
                        {"name": "class", "parameters": {"binary_data": False}}]}  # fmt: skip
    answer = http.post("/v2/models/digits-cnn/versions/v1/infer", json=body, headers=KEY)
    # THEN v1 was asked, with one input per row
    assert answer.status_code == 200, answer.text
    sent = QueueMessage.model_validate_json(queue.visible[-1]["body"])
    assert (sent.version, sent.n_inputs) == ("v1", 2)
    # AND the JSON header comes first, then the raw probabilities
    size = int(answer.headers["inference-header-content-length"])
    header = json.loads(answer.content[:size])
    assert header["id"] == "r-1" and header["model_version"] == "v1"
    assert [o["name"] for o in header["outputs"]] == ["probabilities", "class"]
    assert header["outputs"][1]["data"] == [1, 1]
    assert struct.unpack("<4f", answer.content[size:]) == (0.25, 0.75, 0.25, 0.75)


@pytest.mark.parametrize(
    ("path", "body", "status", "said"),
    [
        ("/v2/models/nope/infer", {"inputs": [image()]}, 404, "model 'nope' does not exist"),
        ("/v2/models/digits-cnn/versions/v9/infer", {"inputs": [image()]}, 404, "'v9'"),
        (
            "/v2/models/digits-cnn/infer",
            {"inputs": [{**image(), "shape": [1, 63], "data": [1.0] * 63}]},
            400,
            "input.shape: is [1, 63]; input takes [n, 64]",
        ),
        (
            "/v2/models/digits-cnn/infer",
            {"inputs": [{**image(), "data": [99.0] * 64}]},
            400,
            "input[0][0]: is 99.0; the maximum is 16",
        ),
        (
            "/v2/models/digits-cnn/infer",
            {"inputs": [{**image(), "datatype": "FP99"}]},
            400,
            "inputs[0].datatype",
        ),
        (
            "/v2/models/digits-cnn/infer",
            {"inputs": [image()], "outputs": [{"name": "logits"}]},
            400,
            "outputs[0].name: 'logits' is not an output of digits-cnn",
        ),
        ("/v2/models/digits-cnn/infer", {"inputs": [{**image(), "name": "x"}]}, 400, "inputs:"),
        ("/v2/models/digits-cnn/nothing", {}, 404, "/v2/models/digits-cnn/nothing"),
    ],
)
def test_refusals_have_the_protocols_shape(client, path, body, status, said):
    http, queue = client
    answer = http.post(path, json=body, headers=KEY)
    assert answer.status_code == status, answer.text
    assert list(answer.json()) == ["error"]
    assert said in answer.json()["error"]
    assert not queue.visible


def test_malformed_json_and_a_wrong_header_length_are_400(client):
    http, _ = client
    bad = http.post("/v2/models/digits-cnn/infer", content=b"{", headers=KEY)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    header = {**KEY, "Inference-Header-Content-Length": "999"}
    long = http.post("/v2/models/digits-cnn/infer", content=b"{}", headers=header)
    assert long.status_code == 400
    assert long.json()["error"].startswith("Inference-Header-Content-Length")


def test_without_a_key_the_gateway_refuses(client):
    http, _ = client
    assert http.get("/v2/models/digits-cnn").status_code == 401


def test_an_embedders_metadata_names_text_in_and_a_vector_out():
    record = version_record("minilm-embed")
    assert output_specs(record.signature)[0].metadata() == {
        "name": "embedding",
        "datatype": "FP32",
        "shape": [-1, -1],
    }


def test_a_models_platform_is_the_engine_its_workers_said_else_its_runtimes():
    from switchyard_router.oip import platform_of

    record = version_record("pydoc-gpt")
    said = {("pydoc-gpt", "v1"): "vllm"}

    def engine_of(model: str, version: str) -> str | None:
        return said.get((model, version))

    def unreachable(model: str, version: str) -> str | None:
        raise ConnectionError("the table cannot be read")

    assert platform_of(record, engine_of) == "vllm"
    said.clear()  # no worker has loaded it yet: its runtime's engine
    assert platform_of(record, engine_of) == "transformers"
    assert platform_of(record, unreachable) == "transformers"
    assert platform_of(record) == "transformers"
