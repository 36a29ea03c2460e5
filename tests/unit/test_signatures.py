from __future__ import annotations

import math

import pytest

from switchyard.schemas import TensorSignature, TextSignature
from switchyard.signatures import _check_tensor, check_each, check_inputs, check_item

TEXT = TextSignature(max_chars=10)
TENSOR = TensorSignature(shape=(4,), minimum=0, maximum=16)


def fields(errors):
    return [(e.field, e.message) for e in errors]


def test_valid_inputs_have_no_errors():
    assert check_inputs(["hello", "world"], TEXT, 5) == []
    assert check_inputs([[0, 1.5, 16, 3]], TENSOR, 5) == []


@pytest.mark.parametrize(
    ("inputs", "field", "fragment"),
    [
        ("hello", "inputs", "must be a list, got string"),
        ([], "inputs", "at least one"),
        (["a"] * 6, "inputs", "holds 6 inputs; at most 5"),
        (["ok", 3], "inputs[1]", "must be a string, got number"),
        (["ok", "   "], "inputs[1]", "must not be empty"),
        (["x" * 11], "inputs[0]", "11 characters; at most 10"),
    ],
)
def test_text_errors_name_the_field(inputs, field, fragment):
    errors = check_inputs(inputs, TEXT, 5)
    assert errors, "expected an error"
    assert errors[0].field == field
    assert fragment in errors[0].message


@pytest.mark.parametrize(
    ("item", "field", "fragment"),
    [
        ("abcd", "inputs[0]", "must be a list of 4 numbers, got string"),
        ([1, 2, 3], "inputs[0]", "exactly 4 numbers, got 3"),
        ([1, 2, "3", 4], "inputs[0][2]", "must be a number, got string"),
        ([1, True, 3, 4], "inputs[0][1]", "must be a number, got boolean"),
        ([1, 2, 3, 17], "inputs[0][3]", "the maximum is 16"),
        ([-1, 2, 3, 4], "inputs[0][0]", "the minimum is 0"),
        ([math.nan, 2, 3, 4], "inputs[0][0]", "finite"),
    ],
)
def test_tensor_errors_name_the_element(item, field, fragment):
    errors = check_inputs([item], TENSOR, 5)
    assert fields(errors)[0][0] == field
    assert fragment in errors[0].message


def test_every_bad_item_is_reported_up_to_a_bound():
    errors = check_inputs([1] * 50, TEXT, 100)
    assert len(errors) == 20
    assert errors[19].field == "inputs[19]"


def test_an_integer_too_large_for_a_float_is_a_clear_error():
    errors = check_inputs([[1, 10**400, 3, 4]], TENSOR, 5)
    assert fields(errors) == [("inputs[0][1]", "is too large for a 64-bit float")]


@pytest.mark.parametrize(
    "value",
    [0, 16, 1.5, -0.0, 17, -1, 16.000001, math.nan, math.inf, -math.inf, True, False]
    + ["3", None, [1], {"a": 1}, 10**400, 2**53 + 1],
    ids=lambda value: repr(value)[:12],
)
def test_the_one_call_check_accepts_nothing_the_walk_refuses(value):
    """check_inputs and check_item first check tensors in one call into pydantic-core and
    walk them only when that fails; the walk (_check_tensor) names each problem. For a value in
    every place of an input, and for inputs of other shapes, both say the same."""
    tuple_row = (1, 2, 3, 4)
    cases = [[[value, 2, 3, 4]], [[1, 2, 3, value]], [[1, 2, 3, 4], [value] * 4]]
    cases += [[tuple_row], [[1, 2, 3]], [[1, 2, 3, 4, 5]], [[1, 2, 3, 4], "abcd"]]
    for inputs in cases:
        where = [(x, f"inputs[{i}]") for i, x in enumerate(inputs)]
        walked = [e for x, at in where for e in _check_tensor(x, TENSOR, at)]
        assert check_inputs(inputs, TENSOR, 5) == walked, inputs
        assert [e for x, at in where for e in check_item(x, TENSOR, at)] == walked, inputs


def test_many_requests_checked_together_get_each_its_own_errors():
    # GIVEN three requests' tensors, the second with one value off the signature
    sig = TensorSignature(shape=(3,), minimum=0, maximum=16)
    each = [[[1, 2, 3]], [[1, 2, 3], [1, 99, 3]], [[0, 0, 0]]]
    # WHEN they are checked together
    problems = check_each(each, sig, max_inputs=4)
    # THEN only the second has an error, naming its own row and value
    assert problems[0] == [] and problems[2] == []
    assert [p.field for p in problems[1]] == ["inputs[1][1]"]
    # AND all valid, none has any; a request over the bound is refused alone
    assert check_each([[[1, 2, 3]], [[4, 5, 6]]], sig, max_inputs=1) == [[], []]
    over = check_each([[[1, 2, 3]], [[1, 2, 3]] * 2], sig, max_inputs=1)
    assert over[0] == [] and "at most 1" in over[1][0].message


@pytest.mark.parametrize(
    "each",
    [
        [["hello"], ["a", "world"]],
        [["hello"], ["ok", "   "], ["fine"]],
        [["x" * 11], ["ok"]],
        [["ok"], ["", "ok"], [3]],
        [["ok", "\u3000"], ["ok"]],
        [["ok"], ["a"] * 6],
    ],
)
def test_texts_checked_together_get_what_each_gets_alone(each):
    # GIVEN requests' texts, all valid or some blank, too long, not text or too many
    # WHEN they are checked together
    together = check_each(each, TEXT, max_inputs=5)
    # THEN each has exactly the errors it has checked alone
    assert together == [check_inputs(x, TEXT, 5) for x in each]
