"""Embeddings are stored as float32; everything else as JSON text."""

from __future__ import annotations

import json

import pytest

from switchyard.jsontext import json_bytes
from switchyard.results import outputs_attribute, pack_rows, unpack_rows


def test_rounded_embeddings_round_trip_and_take_a_third_of_their_json():
    rows = [[round((i * 37 % 200 - 100) / 113.0, 7) for i in range(384)] for _ in range(4)]
    packed = pack_rows(rows)
    assert packed is not None and unpack_rows(packed) == rows
    assert len(packed) * 2.5 < len(json.dumps(rows, separators=(",", ":")))


@pytest.mark.parametrize(
    "outputs",
    [
        [],
        [{"class": 1, "probabilities": [0.5, 0.5]}],
        [[0.5, 0.25], [0.5]],  # ragged
        [[1, 2, 3]],  # integers stay integers
        [[0.5, True]],
        [[0.1234567891]],  # more digits than float32 holds
        [[123456.1234567]],  # too large for 7 decimals in float32
        [[]],
    ],
)
def test_anything_float32_cannot_hold_exactly_stays_json(outputs):
    assert pack_rows(outputs) is None


def test_outputs_go_inline_only_within_the_limit_packed_or_as_json():
    rows = [[round((i * 37 % 200 - 100) / 113.0, 7) for i in range(384)] for _ in range(4)]
    packed_size = 4 + 4 * 384 * 4
    # Embeddings within the limit are packed; past it they are not inline at all
    # (their JSON is larger still).
    assert outputs_attribute(rows, packed_size)[0] == "outputs_f32"
    assert pack_rows(rows, packed_size - 1) is None
    assert outputs_attribute(rows, packed_size - 1) is None
    # Other outputs are JSON text, inline while it fits.
    labels = [{"class": 1, "label": "é", "probabilities": [0.5, 0.5]}]
    name, value = outputs_attribute(labels, 1000)
    assert name == "outputs" and json.loads(value["S"]) == labels
    assert outputs_attribute(labels, len(value["S"].encode()) - 1) is None


def test_stored_json_reads_back_as_the_values_written():
    values = [{"x": [0.1234567, -1e-05, 3.0, 12345678.9], "text": "héllo ☃", "n": None}]
    assert json.loads(json_bytes(values)) == values
    # Not-a-number floats as the json module writes and reads them; or as null, for
    # answers to strict readers.
    odd = [float("inf"), float("-inf")]
    assert json.loads(json_bytes(odd)) == odd
    assert json.loads(json_bytes(odd, nan_as_null=True)) == [None, None]
