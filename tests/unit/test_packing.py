"""Embeddings are stored as float32; everything else as JSON text."""

from __future__ import annotations

import json

import pytest

from switchyard.results import pack_rows, unpack_rows


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
