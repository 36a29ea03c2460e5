"""The worker's msgspec reading of plain messages (``switchyard_worker.work_messages``)
held to ``QueueMessage``: a message it reads, ``QueueMessage`` reads with the same
values; what it refuses is left to ``QueueMessage`` (and named there)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import msgspec
import pytest
from pydantic import TypeAdapter, ValidationError

from switchyard.queues import decode_checked, decode_messages, tensor_block
from switchyard.schemas import JobChunk, QueueMessage
from switchyard_worker.work_messages import WorkMessage, read_plain

NOW = time.time()


def body(**changes: Any) -> dict[str, Any]:
    """A plain message's fields as the router writes them, with ``changes``
    (a value of ``...`` drops the field)."""
    fields: dict[str, Any] = {
        "schema_version": 1,
        "request_id": "r1",
        "tenant": "acme",
        "model": "digits-cnn",
        "version": "v1",
        "lane": "realtime",
        "inputs": [[1.0] * 64],
        "n_inputs": 1,
        "enqueued_at": NOW,
        "expires_at": NOW + 60,
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not ...}


def block(*rows: list[float]) -> str:
    """Rows as a message's ``tensor`` carries them in its JSON (base64)."""
    return base64.b64encode(tensor_block(list(rows))).decode()


def text(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"))


def as_queue_message(message: WorkMessage) -> dict[str, Any]:
    return msgspec.structs.asdict(message)


def test_it_has_queue_messages_fields_and_defaults():
    ours = {f.name: f.default for f in msgspec.structs.fields(WorkMessage)}
    theirs = {
        name: None if field.is_required() else field.get_default(call_default_factory=True)
        for name, field in QueueMessage.model_fields.items()
    }
    assert set(ours) == set(theirs)
    assert {k: v for k, v in ours.items() if v is not msgspec.NODEFAULT} == {
        k: v for k, v in theirs.items() if not QueueMessage.model_fields[k].is_required()
    }


GOOD = [
    body(),
    body(respond_by=NOW + 5, queued_counted=False),
    body(lane="batch", queued_counted=True),
    body(shadow_of="r0", fallback=True),
    body(cache_key="ab" * 32),
    body(inputs=..., inputs_ref="s3://b/inputs/acme/r1.json", n_inputs=3),
    body(inputs=[[0] * 64, [16] * 64], n_inputs=2),  # JSON integers, as floats
    body(job=None),
    body(inputs=..., tensor=block([1.0] * 64), n_inputs=1),  # rows as one block of numbers
    body(inputs=..., tensor=block([0.0] * 64, [16.0] * 64), n_inputs=2),
    body(request_id="x" * 64, tenant="t" * 128),
]


@pytest.mark.parametrize("fields", GOOD)
def test_what_the_router_sends_reads_as_queue_message_reads_it(fields, digits_v1):
    bodies = [text(fields), text(body(request_id="r2"))]
    for signature in (None, digits_v1.signature):
        read = read_plain(bodies, signature)
        assert read is not None
        expected = [dict(QueueMessage.model_validate_json(b)) for b in bodies]  # field by field
        assert [as_queue_message(m) for m in read] == expected


BAD = {
    "a field missing": body(tenant=...),
    "a field unknown": body(priority=1),
    "an empty request id": body(request_id=""),
    "a request id over 64": body(request_id="x" * 65),
    "a tenant over 128": body(tenant="t" * 129),
    "another schema version": body(schema_version=2),
    "another lane": body(lane="bulk"),
    "no inputs at all": body(inputs=...),
    "inputs and a claim check": body(inputs_ref="s3://b/k"),
    "inputs and a block": body(tensor=block([1.0] * 64)),
    "a block not base64": body(inputs=..., tensor="not base64!"),
    "a block of no rows": body(inputs=..., tensor=""),
    "a block a byte short": body(inputs=..., tensor=base64.b64encode(b"\0" * 511).decode()),
    "a block not of n_inputs rows": body(inputs=..., tensor=block([1.0] * 3), n_inputs=2),
    "n_inputs off": body(n_inputs=2),
    "n_inputs 0": body(inputs=[], n_inputs=0),
    "a cache key not a sha256": body(cache_key="abc"),
    "a string for a number": body(enqueued_at=str(NOW)),
    "a string for a flag": body(fallback="true"),
    "a job's chunk": body(job={"job_id": "j", "index": 0, "first_line": 1, "last_line": 1}),
}


@pytest.mark.parametrize("fields", BAD.values(), ids=BAD.keys())
def test_what_it_refuses_is_left_to_queue_message(fields):
    # WHEN a receive holds one such message beside a good one
    bodies = [text(body()), text(fields)]
    # THEN msgspec reads none of it, and QueueMessage decides each
    assert read_plain(bodies) is None
    good, other = decode_messages(bodies)
    assert isinstance(good, QueueMessage)
    if "job" in fields:
        assert isinstance(other, QueueMessage) and isinstance(other.job, JobChunk)


# QueueMessage's lax mode reads a number or a flag written as a string, and a job's
# chunk is its to read: the rest it refuses too.
REFUSED_BY_BOTH = {k: f for k, f in BAD.items() if "string for" not in k and "job" not in f}


@pytest.mark.parametrize("fields", REFUSED_BY_BOTH.values(), ids=REFUSED_BY_BOTH.keys())
def test_what_it_refuses_queue_message_refuses_too(fields):
    with pytest.raises(ValidationError):
        QueueMessage.model_validate_json(text(fields))


ROWS = {
    "a row short": [[1.0] * 63],
    "a row long": [[1.0] * 65],
    "a value over the range": [[1.0] * 63 + [17.0]],
    "a value under it": [[-1.0] + [1.0] * 63],
    "a boolean": [[True] + [1.0] * 63],
    "a string": [["1"] + [1.0] * 63],
    "a row not a list": [1.0],
}


@pytest.mark.parametrize("inputs", ROWS.values(), ids=ROWS.keys())
def test_inputs_off_the_signature_are_left_to_be_checked_apart(inputs, digits_v1):
    bodies = [text(body()), text(body(request_id="r2", inputs=inputs))]
    assert read_plain(bodies, digits_v1.signature) is None
    # ... as pydantic-core's checked decode leaves them too
    assert decode_checked(bodies, digits_v1.signature) is None
    # unchecked, a row is any JSON value: read by both
    read = read_plain(bodies)
    assert read is not None and read[1].inputs == inputs


def test_a_number_too_large_for_a_float_is_refused(digits_v1):
    fields = text(body(request_id="r2")).replace('"inputs":[[1.0,', '"inputs":[[1e999,', 1)
    assert read_plain([fields], digits_v1.signature) is None
    assert decode_checked([fields], digits_v1.signature) is None


def test_bodies_that_join_into_other_messages_are_refused():
    one, two, three = (text(body(request_id=f"r{i}")) for i in range(3))
    assert read_plain([f"{one},{two}", three]) is None
    assert read_plain(["{not json", one]) is None


def test_an_open_range_takes_any_finite_number(digits_v1):
    open_range = digits_v1.signature.model_copy(update={"minimum": None, "maximum": None})
    read = read_plain([text(body(inputs=[[-1e300] + [1e300] * 63]))], open_range)
    assert read is not None and read[0].inputs[0][0] == -1e300


def test_the_same_messages_read_by_either_way_are_equal_field_by_field():
    # a message read either way answers the worker's questions alike
    raw = [text(body(respond_by=NOW + 1, cache_key="0" * 64))]
    [ours] = read_plain(raw) or []
    [theirs] = TypeAdapter(list[QueueMessage]).validate_json(f"[{raw[0]}]")
    for name in QueueMessage.model_fields:
        assert getattr(ours, name) == getattr(theirs, name), name
