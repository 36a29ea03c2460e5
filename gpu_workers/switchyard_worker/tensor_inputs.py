"""A tensor model's packed inputs (``QueueMessage.packed_inputs``): read into one
array per message, checked against the signature as arrays, and a batch's inputs
stacked for the model, with no Python object per value.

The router packs inputs whose every value is a float32 exactly
(``switchyard.queues.pack_inputs``); others come as JSON lists, and a batch may hold
both.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from switchyard.fields import FieldError
from switchyard.queues import packed_width
from switchyard.schemas import TensorSignature
from switchyard.signatures import MAX_ERRORS, check_inputs, check_item


def read_packed(text: str, n_inputs: int) -> np.ndarray:
    """Packed inputs of ``n_inputs`` rows as a read-only ``(n_inputs, width)``
    float32 array over their bytes (ValueError if they are not such inputs)."""
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError("packed_inputs is not base64") from None
    width = packed_width(data, n_inputs)
    return np.frombuffer(data, dtype="<f4", offset=4).reshape(n_inputs, width)


def check_rows(
    inputs: Any, signature: TensorSignature, max_inputs: int, field: str = "inputs"
) -> list[FieldError]:
    """:func:`switchyard.signatures.check_inputs` of packed inputs: the same errors,
    found for the whole array at once (finite, within the bounds, the signature's
    length); only a row that fails is walked, to name its first offending value."""
    if not isinstance(inputs, np.ndarray):
        return check_inputs(inputs, signature, max_inputs, field)
    n, width = inputs.shape
    if n > max_inputs:
        return [FieldError(field, f"holds {n} inputs; at most {max_inputs} allowed")]
    (length,) = signature.shape
    if width == length:
        bad = ~np.isfinite(inputs)
        if signature.minimum is not None:
            bad |= inputs < signature.minimum
        if signature.maximum is not None:
            bad |= inputs > signature.maximum
        failing = np.flatnonzero(bad.any(axis=1))
    else:
        failing = np.arange(n)
    errors: list[FieldError] = []
    for i in failing[:MAX_ERRORS].tolist():
        errors.extend(check_item(inputs[i].tolist(), signature, f"{field}[{i}]"))
    return errors[:MAX_ERRORS]


def stacked(inputs_each: list[Any]) -> Any:
    """A batch's inputs in order, for the model: one array where any request's are
    packed (float32 if all are, else float64, so that JSON values reach a runtime
    that reads float64 as they came); otherwise the inputs' list, as before."""
    if not any(isinstance(x, np.ndarray) for x in inputs_each):
        return [x for inputs in inputs_each for x in inputs]
    arrays = [x if isinstance(x, np.ndarray) else np.asarray(x, np.float64) for x in inputs_each]
    dtype = np.float32 if all(a.dtype == np.float32 for a in arrays) else np.float64
    return np.concatenate(arrays).astype(dtype, copy=False)
