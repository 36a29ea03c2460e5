"""The emulator's direct PutItem writes and answers what moto does: one script of
PutItems, plain and not, each sent to moto's WSGI application against one table
and to it wrapped by ``moto_reads.wrap`` against a twin table; every answer, and
every item each leaves, compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_puts
from tests.unit.test_moto_reads import RESULTS_KEYS, answered_directly, call, twins


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, list[str]]]:
    """moto's application and the wrapped one, each with its twin table; and a log of
    the PutItems the wrapped one wrote itself."""
    with answered_directly(moto_puts, "put_item") as written:
        moto, fast = twins()
        for table in ("by-moto", "by-fast"):
            assert call(moto, "CreateTable", {"TableName": table, **RESULTS_KEYS})[0] == 200
        yield moto, fast, written


def item(rid: str, **more: Any) -> dict[str, Any]:
    return {
        "tenant": {"S": "acme"},
        "request_id": {"S": rid},
        "status": {"S": "queued"},
        "expires_at": {"N": "1795600000"},
        "doc": {"S": '{"created_at": 1.5}'},
        **more,
    }


QUEUED = {
    "ConditionExpression": "attribute_not_exists(#sk)",
    "ExpressionAttributeNames": {"#sk": "request_id"},
}
SCRIPT: list[tuple[str, dict[str, Any], bool]] = [
    # (what, the request without its table, written directly)
    ("a plain put", {"Item": item("p1")}, True),
    ("the router's queued record", {"Item": item("q1"), **QUEUED}, True),
    ("the same again: its condition fails", {"Item": item("q1"), **QUEUED}, False),
    ("over a plain put", {"Item": item("p1", status={"S": "done"})}, True),
    (
        "conditioned on a value",
        {
            "Item": item("p1", status={"S": "error"}),
            "ConditionExpression": "#st = :s",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {":s": {"S": "done"}},
        },
        True,
    ),
    ("booleans and nulls", {"Item": item("p2", ok={"BOOL": True}, no={"NULL": True})}, True),
    ("a binary", {"Item": item("p3", outputs_f32={"B": "AAECAw=="})}, False),
    ("a map", {"Item": item("p4", doc={"M": {"a": {"S": "b"}}})}, False),
    ("a set", {"Item": item("p5", tags={"SS": ["a"]})}, False),
    ("an empty key", {"Item": item("")}, False),
    ("no range key", {"Item": {"tenant": {"S": "acme"}}}, False),
    ("a key of the wrong type", {"Item": item("p6", tenant={"N": "1"})}, False),
    ("ReturnValues", {"Item": item("p7"), "ReturnValues": "ALL_OLD"}, False),
    ("ReturnConsumedCapacity", {"Item": item("p8"), "ReturnConsumedCapacity": "TOTAL"}, False),
    ("a name not used", {"Item": item("p9"), "ExpressionAttributeNames": {"#x": "y"}}, False),
    ("a bad condition", {"Item": item("p10"), "ConditionExpression": "status ==="}, False),
    ("empty values", {"Item": item("p11"), **QUEUED, "ExpressionAttributeValues": {}}, False),
]


@pytest.mark.parametrize(("what", "request_", "direct"), SCRIPT, ids=[s[0] for s in SCRIPT])
def test_a_put_answers_and_writes_what_moto_does(clients, what, request_, direct):
    moto, fast, written = clients
    before = len(written)
    by_moto = call(moto, "PutItem", {"TableName": "by-moto", **request_})
    by_fast = call(fast, "PutItem", {"TableName": "by-fast", **request_})
    # THEN the answers are the same (each naming its own table), and so is what each
    # table holds after
    assert tuple(json.loads(json.dumps(by_fast).replace("by-fast", "by-moto"))) == by_moto, what
    for rid in {request_["Item"].get("request_id", {}).get("S"), "p1", "q1"} - {None, ""}:
        key = {"tenant": {"S": "acme"}, "request_id": {"S": rid}}
        assert call(moto, "GetItem", {"TableName": "by-fast", "Key": key}) == call(
            moto, "GetItem", {"TableName": "by-moto", "Key": key}
        ), (what, rid)
    # AND the plain ones were written directly, the rest left to moto
    assert (len(written) > before) is direct, what


def test_a_put_to_a_missing_table_is_moto_s_answer(clients):
    moto, fast, written = clients
    before = len(written)
    body = {"TableName": "no-such-table", "Item": item("x")}
    assert call(fast, "PutItem", body) == call(moto, "PutItem", body)
    assert call(moto, "PutItem", body)[0] == 400
    assert len(written) == before
