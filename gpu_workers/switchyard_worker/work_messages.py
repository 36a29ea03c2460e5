"""A receive's messages read in one pass by msgspec: the worker's reading of the
plain ``QueueMessage`` (a realtime or async request, not a job's chunk).

A receive's bodies are joined into one JSON array and decoded into ``WorkMessage``
structs in one call, a tensor version's inline inputs checked against its signature
as they are parsed (each row's length and range). A struct costs a fraction of a
pydantic model to build: on digits-cnn's one-input messages the decode took 1.8 µs a
message against pydantic-core's 5.0.

This is a fast path only. What it does not read (a job's chunk, any body that
fails it) is decoded by ``switchyard.queues`` with ``QueueMessage``, which also names
what is wrong with a bad one. So every rule here is at least as strict as
``QueueMessage``'s: a message this accepts, ``QueueMessage`` accepts with the same
values (``tests/unit/test_work_messages.py`` holds the two to each other).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

import msgspec

from switchyard.queues import joined_bodies
from switchyard.schemas import TensorSignature, one_payload

RequestId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Tenant = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
CacheKey = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class WorkMessage(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A plain request's message, as ``QueueMessage`` holds it (the same fields,
    defaults and bounds), but never a job's chunk: ``job`` is always None."""

    schema_version: Literal[1] = 1
    request_id: RequestId
    tenant: Tenant
    model: str
    version: str
    lane: Literal["realtime", "batch"] = "realtime"
    inputs: list[Any] | None = None
    inputs_ref: str | None = None
    tensor: bytes | None = None  # base64 in the JSON, as QueueMessage's
    n_inputs: Annotated[int, msgspec.Meta(ge=1)]
    enqueued_at: float
    expires_at: float
    respond_by: float | None = None
    shadow_of: str | None = None
    fallback: bool = False
    cache_key: CacheKey | None = None
    queued_counted: bool = False
    # A job's chunk is left to QueueMessage: here ``job`` is absent or null.
    job: None = None

    def __post_init__(self) -> None:
        one_payload(self.inputs, self.inputs_ref, self.tensor, self.n_inputs)  # QueueMessage's


def read_plain(
    bodies: list[str], signature: TensorSignature | None = None
) -> list[WorkMessage] | None:
    """Each body's message, read in one call (with ``signature``: its inline inputs
    checked as ``signature``'s rows as they are parsed). None unless every body is
    one plain message that passes: those are left to ``switchyard.queues``."""
    joined = joined_bodies(bodies)
    if joined is None:
        return None
    try:
        messages = _decoder(signature).decode(joined)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return messages if len(messages) == len(bodies) else None


@lru_cache(maxsize=16)
def _decoder(signature: TensorSignature | None) -> msgspec.json.Decoder[list[Any]]:
    if signature is None:
        return msgspec.json.Decoder(list[WorkMessage])
    return msgspec.json.Decoder(list[_checked(signature)])  # type: ignore[misc]


def _checked(signature: TensorSignature) -> type[WorkMessage]:
    """``WorkMessage`` whose inline inputs are ``signature``'s rows: a fixed number
    of finite numbers (JSON integers too, as ``QueueMessage``'s strict floats take
    them; never booleans or strings), each within the signature's range."""
    (length,) = signature.shape
    bounds = {}
    if signature.minimum is not None:
        bounds["ge"] = signature.minimum
    if signature.maximum is not None:
        bounds["le"] = signature.maximum
    number = Annotated[float, msgspec.Meta(**bounds)] if bounds else float
    row = Annotated[list[number], msgspec.Meta(min_length=length, max_length=length)]  # type: ignore[valid-type]
    return msgspec.defstruct(
        "WorkMessage",
        [("inputs", list[row] | None, None)],  # type: ignore[valid-type]
        bases=(WorkMessage,),
        forbid_unknown_fields=True,
        kw_only=True,
    )
