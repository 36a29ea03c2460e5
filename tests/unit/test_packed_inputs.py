"""A tensor model's inputs packed in the queue message: the router's packing, the
claim check, and the worker's arrays, checks and batches."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import pytest

from harness.fakes import FakePayloads, FakeQueue, FakeResults, worker_over_fakes
from harness.router_app import predict_service, router_client
from switchyard.queues import ModelLanes, encode_message, pack_inputs, unpack_inputs
from switchyard.schemas import QueueMessage, TensorSignature
from switchyard.signatures import check_inputs
from switchyard_worker.tensor_inputs import check_rows, read_packed, stacked

IMAGE = [float(i % 17) for i in range(64)]


def message(inputs: list[Any], rid: str = "r1") -> QueueMessage:
    packed = pack_inputs(inputs)
    return QueueMessage(
        request_id=rid,
        tenant="acme",
        model="digits-cnn",
        version="v1",
        inputs=inputs if packed is None else None,
        packed_inputs=packed,
        n_inputs=len(inputs),
        enqueued_at=time.time(),
        expires_at=time.time() + 3600,
    )


def test_rows_of_float32_values_are_packed_and_read_back_the_same():
    # GIVEN two images, one of ints and one of floats, every value a float32 exactly
    rows = [[int(x) for x in IMAGE], [x / 4 for x in IMAGE]]
    # WHEN they are packed
    packed = pack_inputs(rows)
    # THEN the router's unpacking and the worker's array give back the same values
    assert packed is not None
    assert unpack_inputs(packed, 2) == rows
    array = read_packed(packed, 2)
    assert array.dtype == np.float32 and array.shape == (2, 64)
    assert array.tolist() == rows


@pytest.mark.parametrize(
    "inputs",
    [
        [[0.1] * 64],  # not a float32 exactly: the model's float32 would round it
        ["a sentence"],
        [[1.0, 2.0], [3.0]],
        [[True] * 64],
        [[10**40] * 64],
        [{"prompt": "x"}],
        [[]],
    ],
)
def test_inputs_that_are_not_float32_rows_go_as_json(inputs):
    assert pack_inputs(inputs) is None


def test_a_packed_message_too_large_for_sqs_goes_to_s3_as_json_rows():
    # GIVEN a packed message larger than the claim check's threshold
    payloads = FakePayloads()
    m = message([IMAGE] * 4)
    # WHEN it is encoded
    body = json.loads(encode_message(m, payloads, claim_check_bytes=200))
    # THEN its inputs are in S3 as the JSON rows they were, and the body holds the
    # reference alone
    assert "packed_inputs" not in body and "inputs" not in body
    assert payloads.get_json(body["inputs_ref"]) == [IMAGE] * 4


@pytest.mark.parametrize(
    ("text", "n", "why"),
    [
        ("not base64!", 1, "not base64"),
        (pack_inputs([IMAGE]), 2, "does not hold 2 rows of 64"),
        ("AAAA", 1, "holds no row length"),
        ("AAAAAA==", 1, "does not hold 1 rows of 0"),
    ],
)
def test_packed_inputs_that_do_not_add_up_are_refused(text, n, why):
    with pytest.raises(ValueError, match=why):
        read_packed(text, n)


def test_packed_rows_are_checked_as_their_lists_are():
    # GIVEN digits-cnn's signature and rows that break it: a value over the maximum,
    # one below the minimum, one not finite, and a row of the wrong length
    sig = TensorSignature(kind="tensor", shape=[4], minimum=0, maximum=16)
    rows = [[1.0, 2.0, 3.0, 4.0], [1.0, 17.0, 3.0, 99.0], [-1.0, 0.0, 0.0, 0.0], [math.inf] * 4]
    array = np.asarray(rows, np.float32)
    # WHEN they are checked as an array, THEN the errors are those of the lists
    assert check_rows(array, sig, 8) == check_inputs(rows, sig, 8)
    assert [e.field for e in check_rows(array, sig, 8)] == [
        "inputs[1][1]",
        "inputs[2][0]",
        "inputs[3][0]",
    ]
    assert check_rows(array[:1], sig, 8) == []
    assert check_rows(np.zeros((2, 3), np.float32), sig, 8) == check_inputs([[0] * 3] * 2, sig, 8)
    assert check_rows(array, sig, 3)[0].message == "holds 4 inputs; at most 3 allowed"


def test_a_batch_of_packed_inputs_is_one_float32_array_and_json_rows_join_as_float64():
    packed = [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)]
    batch = stacked(packed)
    assert batch.dtype == np.float32 and batch.tolist() == [[1] * 3, [1] * 3, [0] * 3]
    mixed = stacked([packed[1], [[0.1, 0.2, 0.3]]])
    assert mixed.dtype == np.float64 and mixed[1].tolist() == [0.1, 0.2, 0.3]
    assert stacked([[[1, 2]], [[3, 4]]]) == [[1, 2], [3, 4]]  # no packed inputs: as before


class ArrayRuntime:
    """Answers each input with its sum, and keeps what each call was given."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def predict(self, inputs: Any) -> list[Any]:
        self.calls.append(inputs)
        return [{"sum": float(np.asarray(x).sum())} for x in inputs]


def test_the_router_sends_a_tensor_models_inputs_packed_where_they_are_float32s(digits_v1):
    # GIVEN the router serving digits-cnn
    queue = FakeQueue("realtime")
    lanes = {"digits-cnn": ModelLanes(realtime=queue, batch=FakeQueue("batch"))}
    client = router_client(predict_service(lanes, digits_v1), {"k-acme": "acme"})
    # WHEN two images are sent async, one of whole numbers and one with a value that
    # is not a float32 exactly
    for inputs in ([[int(x) for x in IMAGE]], [[*IMAGE[:63], 0.3]]):
        answer = client.post(
            "/v1/models/digits-cnn/predict?async=true",
            json={"inputs": inputs},
            headers={"x-api-key": "k-acme"},
        )
        assert answer.status_code == 202
    # THEN the first goes packed, the second as JSON, each as it was sent
    first, second = (json.loads(m["body"]) for m in queue.visible)
    assert "inputs" not in first and unpack_inputs(first["packed_inputs"], 1) == [IMAGE]
    assert "packed_inputs" not in second and second["inputs"] == [[*IMAGE[:63], 0.3]]


def test_the_worker_runs_packed_requests_as_one_array_and_answers_each(digits_v1):
    # GIVEN three packed requests (one of two images) and one whose values are not
    # float32s, sent as JSON
    realtime, runtime, results = FakeQueue("realtime"), ArrayRuntime(), FakeResults()
    worker = worker_over_fakes(digits_v1, runtime, realtime=realtime, results=results)
    sent = {"a": [IMAGE], "b": [IMAGE, [1.0] * 64], "c": [[2.0] * 64], "d": [[0.5 + 1e-9] * 64]}
    for rid, inputs in sent.items():
        realtime.send(message(inputs, rid).model_dump_json(exclude_none=True), "acme")
    # WHEN the worker runs them in one batch
    for _ in range(20):
        worker.step()
    worker.intake.assembler.take(force=True)
    worker.wait_for_results()
    # THEN the model got one array of the five inputs, float64 for the JSON values
    [batch] = runtime.calls
    assert isinstance(batch, np.ndarray) and batch.shape == (5, 64)
    assert batch.dtype == np.float64
    # AND each request has its own outputs, in order
    for rid, inputs in sent.items():
        record = results.get("acme", rid)
        assert record is not None and record.status == "done"
        assert record.outputs == [{"sum": pytest.approx(sum(row))} for row in inputs]


def test_a_packed_request_over_the_signature_gets_an_error_naming_the_value(digits_v1):
    realtime, runtime, results = FakeQueue("realtime"), ArrayRuntime(), FakeResults()
    worker = worker_over_fakes(digits_v1, runtime, realtime=realtime, results=results)
    high = [1.0] * 63 + [17.0]
    realtime.send(message([IMAGE, high], "r-high").model_dump_json(exclude_none=True), "acme")
    for _ in range(20):
        worker.step()
    worker.intake.assembler.take(force=True)
    worker.wait_for_results()
    record = results.get("acme", "r-high")
    assert record is not None and record.status == "error"
    assert record.error is not None and record.error.field == "inputs[1][63]"
    assert runtime.calls == []
