"""The emulator's direct UpdateItem applies and answers what moto does: one script of
UpdateItems, plain and not, each sent to moto's WSGI application for one table and
to it wrapped by ``moto_reads.wrap`` for a twin table; every answer, and the item
each holds after, compared."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_updates
from tests.unit.test_moto_reads import RESULTS_KEYS, answered_directly, call, twins
from tests.unit.test_moto_writes import both_ways

SIDES = {"moto": "updates-by-moto", "fast": "updates-by-fast"}


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, list[str]]]:
    """moto's application and the wrapped one, each with its twin table (a record
    holding a map among them); a log of the UpdateItems the wrapped one applied."""
    with answered_directly(moto_updates, "update_item") as applied:
        moto, fast = twins()
        for table in SIDES.values():
            assert call(moto, "CreateTable", {"TableName": table, **RESULTS_KEYS})[0] == 200
            mapped = {**key("mapped"), "job": {"M": {"chunks": {"N": "3"}}}}
            assert call(moto, "PutItem", {"TableName": table, "Item": mapped})[0] == 200
        yield moto, fast, applied
        for table in SIDES.values():  # moto's tables outlive the module
            call(moto, "DeleteTable", {"TableName": table})


def key(sort: str) -> dict[str, Any]:
    return {"tenant": {"S": "acme"}, "request_id": {"S": sort}}


def take(under: int, **more: Any) -> dict[str, Any]:
    """``DynamoDBQueuedCounts.take``: one more queued, under a cap."""
    return {
        "TableName": "TABLE",
        "Key": key("admission#queued#m"),
        "UpdateExpression": "SET #ttl = :ttl ADD #held :change, #step :add",
        "ConditionExpression": "(attribute_not_exists(#held) OR #held < :under)",
        "ExpressionAttributeNames": {"#held": "held", "#step": "q_100", "#ttl": "expires_at"},
        "ExpressionAttributeValues": {
            ":change": {"N": "1"},
            ":add": {"N": "1"},
            ":under": {"N": str(under)},
            ":ttl": {"N": "1795600000"},
        },
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        **more,
    }


def give_back(**more: Any) -> dict[str, Any]:
    """``DynamoDBQueuedCounts.give_back``: one fewer, on condition the step holds it."""
    return {
        "TableName": "TABLE",
        "Key": key("admission#queued#m"),
        "UpdateExpression": "ADD #held :minus, #step :minus",
        "ConditionExpression": "#step >= :count",
        "ExpressionAttributeNames": {"#held": "held", "#step": "q_100"},
        "ExpressionAttributeValues": {":minus": {"N": "-1"}, ":count": {"N": "1"}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        **more,
    }


def failed(sort: str, **more: Any) -> dict[str, Any]:
    """``DynamoDBResultStore.mark_failed``: a failure counted on a queued record."""
    return {
        "TableName": "TABLE",
        "Key": key(sort),
        "UpdateExpression": "SET failures = if_not_exists(failures, :zero) + :one, "
        "last_failure = :why, #a0 = if_not_exists(#a0, :v0)",
        "ConditionExpression": "attribute_not_exists(#sk) OR #st = :queued",
        "ExpressionAttributeNames": {"#a0": "status", "#sk": "request_id", "#st": "status"},
        "ExpressionAttributeValues": {
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":why": {"S": "v1: out of memory"},
            ":queued": {"S": "queued"},
            ":v0": {"S": "queued"},
        },
        **more,
    }


SCRIPT: list[tuple[str, Any, bool]] = [
    # (what, the request, its table named TABLE, applied directly)
    ("the first take", take(3), True),
    ("a second take", take(3), True),
    ("a take at the cap", take(2), False),
    ("a give back", give_back(), True),
    ("a failure on no record", failed("r1"), True),
    ("a second failure", failed("r1", ReturnValues="ALL_OLD"), True),
    ("the item before, of no item", failed("r2", ReturnValues="ALL_OLD"), True),
    ("a plain SET", failed("r3", ReturnValues="NONE"), True),
    # Not plain, or refused: moto answers
    ("the updated attributes asked", give_back(ReturnValues="UPDATED_NEW"), False),
    ("a capacity report", give_back(ReturnConsumedCapacity="TOTAL"), False),
    ("an item holding a map", failed("mapped"), False),
    (
        "a name not used",
        give_back(ExpressionAttributeNames={"#held": "held", "#step": "q_100", "#x": "x"}),
        False,
    ),
    (
        "a value not used",
        give_back(
            ExpressionAttributeValues={
                ":minus": {"N": "-1"},
                ":count": {"N": "1"},
                ":x": {"N": "1"},
            }
        ),
        False,
    ),
    ("an expression that does not parse", give_back(UpdateExpression="ADD #held"), False),
    ("no values", give_back(ExpressionAttributeValues={}), False),
    (
        "a string added to a number",
        give_back(
            ExpressionAttributeValues={
                ":minus": {"S": "x"},
                ":count": {"N": "1"},
            }
        ),
        False,
    ),
    ("a key missing its range", give_back(Key={"tenant": {"S": "acme"}}), False),
    (
        "a set value",
        give_back(
            ExpressionAttributeValues={
                ":minus": {"NS": ["1"]},
                ":count": {"N": "1"},
            }
        ),
        False,
    ),
    ("a missing table", {**give_back(), "TableName": "no-such-table"}, False),
]


@pytest.mark.parametrize(("what", "request_body", "direct"), SCRIPT, ids=[s[0] for s in SCRIPT])
def test_an_update_answers_and_applies_what_moto_does(clients, what, request_body, direct):
    moto, fast, applied = clients
    before = len(applied)
    # WHEN the same update goes to moto for one table, and to the wrapper for its twin
    by_moto, by_fast = both_ways(moto, fast, "UpdateItem", request_body, SIDES)
    # THEN the answers are the same (but for the table's name), and so are the items
    assert by_fast == by_moto, what
    items = {
        side: call(moto, "GetItem", {"TableName": table, "Key": request_body.get("Key", {})})
        for side, table in SIDES.items()
    }
    assert items["fast"] == items["moto"], what
    # AND the plain ones were applied directly, the rest left to moto
    assert (len(applied) > before) is direct, what
