"""The queue protocol's decoding of a receive's bodies."""

from __future__ import annotations

from pydantic import ValidationError

from harness.fakes import FakeQueue
from switchyard.queues import decode_checked, decode_messages
from switchyard.schemas import QueueMessage
from tests.unit.test_worker import send


def bodies(*request_ids: str) -> list[str]:
    """The bodies of these requests' messages, as the router sends them."""
    queue = FakeQueue("realtime")
    for request_id in request_ids:
        send(queue, request_id)
    return [m["body"] for m in queue.visible]


def test_a_receive_is_decoded_in_order_one_message_per_body():
    messages = decode_messages(bodies(*(f"r{i}" for i in range(10))))
    assert [m.request_id for m in messages] == [f"r{i}" for i in range(10)]


def test_a_bad_body_costs_only_itself():
    # GIVEN a receive with an undecodable body and one that fails the schema
    good = bodies("r0", "r2")
    # WHEN decoded
    first, broken, third, invalid = decode_messages(
        [good[0], "{not json", good[1], '{"request_id": "x"}']
    )
    # THEN the good ones are messages, the others say why they are none
    assert isinstance(first, QueueMessage) and first.request_id == "r0"
    assert isinstance(third, QueueMessage) and third.request_id == "r2"
    assert isinstance(broken, ValidationError) and isinstance(invalid, ValidationError)


def test_bodies_that_join_into_other_messages_are_decoded_alone():
    # GIVEN one body holding two messages, beside a good one: joined, they would
    # read as three good messages
    r0, r1, r2 = bodies("r0", "r1", "r2")
    # WHEN decoded
    joined, good = decode_messages([f"{r0},{r1}", r2])
    # THEN each is decoded alone: the first is no message, the second its own
    assert isinstance(joined, ValidationError)
    assert isinstance(good, QueueMessage) and good.request_id == "r2"


def test_a_receive_decoded_against_a_signature_has_its_inputs_checked_as_parsed(digits_v1):
    # GIVEN a receive of good requests, and the same with one value off the signature
    good = bodies("r0", "r1")
    queue = FakeQueue("realtime")
    send(queue, "r2", inputs=[[1] * 63 + [17]])  # digits-cnn's values are 0..16
    # WHEN decoded against the version's signature
    checked = decode_checked(good, digits_v1.signature)
    refused = decode_checked([good[0], queue.visible[0]["body"]], digits_v1.signature)
    # THEN the good ones are messages with their inputs; a receive with a bad one is
    # left to be decoded and checked apart (None)
    assert checked is not None
    assert [m.request_id for m in checked] == ["r0", "r1"]
    assert all(isinstance(m, QueueMessage) and m.inputs == [[1] * 64] for m in checked)
    assert refused is None
