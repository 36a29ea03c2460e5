"""Tensors of the Open Inference Protocol v2 (KServe's and Triton's REST protocol),
to and from the platform's inputs and outputs, with the standard library only (the
router's import path stays free of numpy).

A tensor has a name, a datatype (``FP32``, ``INT64``, ``BYTES``...), a shape and its
elements in row-major order: in JSON (``data``, flat or nested), or as raw bytes
after the JSON header of the body (``binary_data_size``; the header's length is the
``Inference-Header-Content-Length`` header). Numbers in binary are little-endian;
each ``BYTES`` element is its length (4 bytes, little-endian) and then its bytes.

Each model's tensors follow from its signature (:func:`input_spec`,
:func:`output_specs`): a tensor model takes ``input`` ``[n, features]`` and answers
``class``, ``label`` and ``probabilities``; a text model takes ``text`` ``[n]``
(``BYTES``) and answers ``embedding`` ``[n, dims]``; a generation model takes
``text_input`` ``[1]`` and answers ``text_output`` and ``finish_reason``, as Triton's
vLLM backend names them. A dimension the signature leaves open is ``-1``.

Every fault is a :class:`switchyard.fields.FieldError` naming where it is
(``inputs[0].shape``, ``inputs[0].data[130]``, ``input[2][5]``).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from switchyard.fields import FieldError
from switchyard.schemas import GenerationSignature, Signature, TensorSignature

Datatype = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
]

# Each numeric datatype's element as ``memoryview.cast`` (and ``struct``) reads it.
NUMBER_FORMATS: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "B",
    "UINT16": "H",
    "UINT32": "I",
    "UINT64": "Q",
    "INT8": "b",
    "INT16": "h",
    "INT32": "i",
    "INT64": "q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
}
FLOATS = frozenset({"FP16", "FP32", "FP64"})
# Datatypes a tensor model's input may have: any number but a boolean.
NUMERIC_INPUTS = frozenset(NUMBER_FORMATS) - {"BOOL"}
# Generation settings a generation model's request takes from ``parameters``.
GENERATION_PARAMETERS = ("max_tokens", "temperature", "top_p", "seed", "stop")

_LITTLE_ENDIAN = sys.byteorder == "little"


class TensorFault(Exception):
    """A tensor the protocol or the model cannot take (the caller's mistake)."""

    def __init__(self, error: FieldError) -> None:
        super().__init__(f"{error.field}: {error.message}")
        self.error = error


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model, as the protocol's metadata states it."""

    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: any length

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Tensor:
    """A decoded tensor: its elements flat, in row-major order (numbers, or the
    bytes of each ``BYTES`` element)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    elements: list[Any]


def input_spec(signature: Signature) -> TensorSpec:
    """The one input a model with this signature takes."""
    if isinstance(signature, TensorSignature):
        return TensorSpec("input", "FP32", (-1, *signature.shape))
    if isinstance(signature, GenerationSignature):
        return TensorSpec("text_input", "BYTES", (1,))
    return TensorSpec("text", "BYTES", (-1,))


def output_specs(signature: Signature, labels: tuple[str, ...] = ()) -> list[TensorSpec]:
    """The outputs a model with this signature answers, per input: a classifier's
    class, label and probabilities (one per label, where it names them), an
    embedder's vector, a generation's text and why it ended."""
    if isinstance(signature, TensorSignature):
        return [
            TensorSpec("class", "INT64", (-1,)),
            TensorSpec("label", "BYTES", (-1,)),
            TensorSpec("probabilities", "FP32", (-1, len(labels) or -1)),
        ]
    if isinstance(signature, GenerationSignature):
        return [
            TensorSpec("text_output", "BYTES", (-1,)),
            TensorSpec("finish_reason", "BYTES", (-1,)),
        ]
    return [TensorSpec("embedding", "FP32", (-1, -1))]


def element_count(shape: Iterable[int]) -> int:
    return math.prod(shape)


# -- decoding ------------------------------------------------------------------------


def decode_json(name: str, datatype: str, shape: tuple[int, ...], data: Any, field: str) -> Tensor:
    """A tensor from its JSON ``data`` (flat or nested), checked against its shape
    and datatype; ``field`` names the tensor (``inputs[0]``)."""
    if not isinstance(data, list):
        raise TensorFault(FieldError(f"{field}.data", "must be a list of the tensor's elements"))
    flat = _flattened(data)
    want = element_count(shape)
    if len(flat) != want:
        raise TensorFault(
            FieldError(
                f"{field}.data",
                f"holds {len(flat)} elements; shape {list(shape)} needs {want}",
            )
        )
    if datatype == "BYTES":
        elements: list[Any] = []
        for i, value in enumerate(flat):
            if not isinstance(value, str):
                raise TensorFault(FieldError(f"{field}.data[{i}]", "must be a string (BYTES)"))
            elements.append(value.encode())
        return Tensor(name, datatype, shape, elements)
    for i, value in enumerate(flat):
        fault = _number_fault(datatype, value)
        if fault:
            raise TensorFault(FieldError(f"{field}.data[{i}]", fault))
    return Tensor(name, datatype, shape, flat)


def decode_binary(
    name: str, datatype: str, shape: tuple[int, ...], raw: bytes, field: str
) -> Tensor:
    """A tensor from its raw bytes (``binary_data_size`` of them), little-endian."""
    want = element_count(shape)
    where = f"{field}.parameters.binary_data_size"
    if datatype == "BYTES":
        return Tensor(name, datatype, shape, _bytes_elements(raw, want, where))
    code = NUMBER_FORMATS[datatype]
    size = struct.calcsize(code)
    if len(raw) != want * size:
        raise TensorFault(
            FieldError(
                where,
                f"is {len(raw)} bytes; shape {list(shape)} of {datatype} needs {want * size}",
            )
        )
    elements = _cast(raw, code) if want else []
    if datatype in FLOATS:
        for i, value in enumerate(elements):
            if not math.isfinite(value):
                raise TensorFault(FieldError(f"{field}[{i}]", "must be a finite number"))
    return Tensor(name, datatype, shape, elements)


def _cast(raw: bytes, code: str) -> list[Any]:
    if _LITTLE_ENDIAN:
        return memoryview(raw).cast(code).tolist()
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))


def _bytes_elements(raw: bytes, count: int, where: str) -> list[bytes]:
    elements: list[bytes] = []
    at = 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise TensorFault(FieldError(where, f"element {len(elements)}'s length is cut short"))
        (length,) = struct.unpack_from("<I", raw, at)
        at += 4
        if at + length > len(raw):
            raise TensorFault(
                FieldError(where, f"element {len(elements)} is cut short ({length} bytes declared)")
            )
        elements.append(bytes(raw[at : at + length]))
        at += length
    if len(elements) != count:
        raise TensorFault(
            FieldError(where, f"holds {len(elements)} BYTES elements; the shape needs {count}")
        )
    return elements


def _flattened(data: list[Any]) -> list[Any]:
    if not any(isinstance(value, list) for value in data):
        return data
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            flat.append(value)
        else:
            stack.pop()
    return flat


def _number_fault(datatype: str, value: Any) -> str | None:
    if datatype == "BOOL":
        return None if isinstance(value, bool) else "must be true or false (BOOL)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number ({datatype})"
    if datatype in FLOATS:
        return None
    if isinstance(value, float) and not value.is_integer():
        return f"must be an integer ({datatype})"
    return None


# -- the platform's inputs -----------------------------------------------------------


def platform_inputs(
    tensor: Tensor, signature: Signature, parameters: dict[str, Any] | None = None
) -> list[Any]:
    """A model's input tensor as the platform's inputs (one per row): a tensor
    model's rows of numbers, a text model's strings, a generation request (its
    settings from the request's ``parameters``). The signature's own checks (ranges,
    lengths, counts) are the platform's, run when the request is submitted."""
    spec = input_spec(signature)
    field = f"{tensor.name}.shape"
    if isinstance(signature, TensorSignature):
        if tensor.datatype not in NUMERIC_INPUTS:
            raise TensorFault(
                FieldError(
                    f"{tensor.name}.datatype",
                    f"must be a number type (FP32), not {tensor.datatype}",
                )
            )
        (features,) = signature.shape
        if len(tensor.shape) != 2 or tensor.shape[1] != features:
            raise TensorFault(
                FieldError(field, f"is {list(tensor.shape)}; {spec.name} takes [n, {features}]")
            )
        values = tensor.elements
        if tensor.datatype not in FLOATS:
            values = [float(v) for v in values]
        return [values[i * features : (i + 1) * features] for i in range(tensor.shape[0])]
    if tensor.datatype != "BYTES":
        raise TensorFault(
            FieldError(f"{tensor.name}.datatype", f"must be BYTES, not {tensor.datatype}")
        )
    if not (len(tensor.shape) == 1 or (len(tensor.shape) == 2 and tensor.shape[1] == 1)):
        raise TensorFault(
            FieldError(field, f"is {list(tensor.shape)}; {spec.name} takes [n] or [n, 1]")
        )
    texts = [_text(value, f"{tensor.name}[{i}]") for i, value in enumerate(tensor.elements)]
    if isinstance(signature, GenerationSignature):
        settings = {k: v for k, v in (parameters or {}).items() if k in GENERATION_PARAMETERS}
        return [{"prompt": text, **settings} for text in texts]
    return texts


def _text(value: bytes, field: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TensorFault(FieldError(field, f"is not UTF-8 text: {exc.reason}")) from None


def platform_field(field: str, tensor: str, signature: Signature) -> str:
    """A field the platform's checks name (``inputs[2][5]``, ``inputs[0].max_tokens``)
    as the protocol's caller sent it (``input[2][5]``, ``parameters.max_tokens``)."""
    rest = field.removeprefix("inputs")
    if isinstance(signature, GenerationSignature):
        setting = rest.removeprefix("[0].")
        if setting != rest and setting.split("[")[0] in GENERATION_PARAMETERS:
            return f"parameters.{setting}"
        return f"{tensor}[0]" if rest.startswith("[0]") else tensor
    return f"{tensor}{rest}" if rest.startswith("[") else tensor


# -- the protocol's outputs ----------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """An output tensor ready to answer: JSON ``data``, or raw bytes."""

    metadata: dict[str, Any]  # name, datatype, shape (and parameters)
    raw: bytes | None = None


def output_tensors(
    specs: list[TensorSpec], answers: list[Any], binary: dict[str, bool]
) -> list[Output]:
    """The outputs named in ``binary`` (each with whether it goes as raw bytes), in
    that order, from the platform's answer per input."""
    by_name = {spec.name: spec for spec in specs}
    return [_output(by_name[name], answers, as_raw) for name, as_raw in binary.items()]


def _output(spec: TensorSpec, answers: list[Any], as_raw: bool) -> Output:
    values = [_value_of(spec.name, answer) for answer in answers]
    shape: list[int] = [len(values)]
    if len(spec.shape) == 2:
        shape.append(len(values[0]) if values else 0)
        values = [x for row in values for x in row]
    metadata: dict[str, Any] = {"name": spec.name, "datatype": spec.datatype, "shape": shape}
    if not as_raw:
        metadata["data"] = values
        return Output(metadata)
    raw = encode_binary(spec.datatype, values)
    metadata["parameters"] = {"binary_data_size": len(raw)}
    return Output(metadata, raw)


def _value_of(name: str, answer: Any) -> Any:
    """One input's output ``name`` in the platform's answer (a classifier's and a
    generation's are objects; an embedder's is its vector)."""
    if name == "embedding":
        return answer
    if name == "text_output":
        return answer["text"]
    return answer[name]


def encode_binary(datatype: str, values: list[Any]) -> bytes:
    """Elements as raw little-endian bytes (``BYTES``: each its length, then itself)."""
    if datatype == "BYTES":
        parts = []
        for value in values:
            data = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(struct.pack("<I", len(data)))
            parts.append(data)
        return b"".join(parts)
    return struct.pack(f"<{len(values)}{NUMBER_FORMATS[datatype]}", *values)
