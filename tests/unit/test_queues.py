"""The queue protocol's decoding of a receive's bodies."""

from __future__ import annotations

from pydantic import ValidationError

from switchyard.queues import decode_messages
from switchyard.schemas import QueueMessage


def body(request_id: str) -> str:
    message = QueueMessage(
        request_id=request_id,
        tenant="acme",
        model="m",
        version="v1",
        inputs=[[1.0, 2.0]],
        n_inputs=1,
        enqueued_at=0,
        expires_at=1e12,
    )
    return message.model_dump_json(exclude_none=True)


def test_a_receive_is_decoded_in_order_one_message_per_body():
    bodies = [body(f"r{i}") for i in range(10)]
    messages = decode_messages(bodies)
    assert [m.request_id for m in messages] == [f"r{i}" for i in range(10)]


def test_a_bad_body_costs_only_itself():
    # GIVEN a receive with an undecodable body and one that fails the schema
    bodies = [body("r0"), "{not json", body("r2"), '{"request_id": "x"}']
    # WHEN decoded
    first, broken, third, invalid = decode_messages(bodies)
    # THEN the good ones are messages, the others say why they are none
    assert isinstance(first, QueueMessage) and first.request_id == "r0"
    assert isinstance(third, QueueMessage) and third.request_id == "r2"
    assert isinstance(broken, ValidationError) and isinstance(invalid, ValidationError)


def test_bodies_that_join_into_other_messages_are_decoded_alone():
    # GIVEN one body holding two messages, beside a good one: joined, they would
    # read as three good messages
    two = f"{body('r0')},{body('r1')}"
    # WHEN decoded
    joined, good = decode_messages([two, body("r2")])
    # THEN each is decoded alone: the first is no message, the second its own
    assert isinstance(joined, ValidationError)
    assert isinstance(good, QueueMessage) and good.request_id == "r2"
