"""Tensor inputs as one array per batch: the rows a message carries as one block of
numbers (``QueueMessage.tensor``), stacked and checked without a Python object per
value.

The intake only checks that a message's block holds its rows at its version's row
length (:func:`row_bytes`) and keeps it as it came (:class:`Rows`). The model's thread
joins a batch's blocks into one array (:func:`stacked`) and checks its values
against the signature in one pass (:func:`plainly_valid`), once per batch: checked
per receive on the intake's thread, numpy's two reductions let go of the interpreter
lock beside the model's and the finisher's threads and cost digits-cnn's loop 2.5 µs
an input. A batch that fails the check is checked message by message, as JSON rows
are, to name what is wrong in each (``MicroBatchLoop``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from switchyard.schemas import TENSOR_VALUE_BYTES, TensorSignature

_VALUE = np.dtype("<f8")
assert _VALUE.itemsize == TENSOR_VALUE_BYTES


class Rows:
    """A message's rows as it carried them: ``count`` rows in one block of float64
    numbers (``len`` is its number of inputs, as a list of them would say)."""

    __slots__ = ("block", "count")

    def __init__(self, block: bytes, count: int) -> None:
        self.block = block
        self.count = count

    def __len__(self) -> int:
        return self.count

    def array(self) -> np.ndarray:
        """Its rows (a read-only view of the block)."""
        return np.frombuffer(self.block, dtype=_VALUE).reshape(self.count, -1)

    def tolist(self) -> list[list[float]]:
        """Its rows as JSON rows would be read: to be checked as they are."""
        return self.array().tolist()


def row_bytes(signature: TensorSignature) -> int:
    """The bytes of one of ``signature``'s rows in a block."""
    (length,) = signature.shape
    return length * TENSOR_VALUE_BYTES


def stacked(inputs_each: Sequence[Any]) -> Any:
    """A batch's inputs in one sequence, in order: where any message's are a block
    (:class:`Rows`), one float64 array of every row (JSON rows beside them
    converted), made by one join of the blocks; else one list."""
    if not any(type(x) is Rows for x in inputs_each):
        return [x for inputs in inputs_each for x in inputs]
    if all(type(x) is Rows for x in inputs_each):
        n = sum(x.count for x in inputs_each)
        return np.frombuffer(b"".join(x.block for x in inputs_each), dtype=_VALUE).reshape(n, -1)
    return np.concatenate(
        [x.array() if type(x) is Rows else np.asarray(x, dtype=_VALUE) for x in inputs_each]
    )


def plainly_valid(values: np.ndarray, signature: TensorSignature) -> bool:
    """Every value finite and within ``signature``'s range (the smallest and the
    largest are enough: a NaN makes both NaN)."""
    if not values.size:
        return True
    low, high = float(values.min()), float(values.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        return False
    return (signature.minimum is None or low >= signature.minimum) and (
        signature.maximum is None or high <= signature.maximum
    )
