"""The emulator's direct BatchWriteItem writes and answers what moto does: one script
of BatchWriteItems, plain and not, each sent to moto's WSGI application for one
table and to it wrapped by ``moto_reads.wrap`` for a twin table; every answer, and
every item each table holds after, compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_writes
from tests.unit.test_moto_reads import RESULTS_KEYS, answered_directly, call, twins

SIDES = {"moto": "writes-by-moto", "fast": "writes-by-fast"}


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, list[str]]]:
    """moto's application and the wrapped one, each with its twin table; a log of
    the BatchWriteItems the wrapped one wrote itself."""
    with answered_directly(moto_writes, "batch_write_item") as written:
        moto, fast = twins()
        for table in SIDES.values():
            assert call(moto, "CreateTable", {"TableName": table, **RESULTS_KEYS})[0] == 200
        yield moto, fast, written
        for table in SIDES.values():  # moto's tables outlive the module
            call(moto, "DeleteTable", {"TableName": table})


def cached(key: str, tenant: str = "acme", **more: Any) -> dict[str, Any]:
    """A put of the result cache's item (``DynamoDBResultCache.put``)."""
    item = {
        "tenant": {"S": tenant},
        "request_id": {"S": f"cache#m#v1#{key}"},
        "outputs_packed": {"B": "AAECAwQ="},
        "expires_at": {"N": "1795600000"},
        **more,
    }
    return {"PutRequest": {"Item": item}}


def batch(*entries: Any, **more: Any) -> dict[str, Any]:
    return {"RequestItems": {"TABLE": list(entries)}, **more}


SCRIPT: list[tuple[str, Any, bool]] = [
    # (what, the request, its table named TABLE, written directly)
    ("the cache's batch", batch(*(cached(f"k{i}") for i in range(25))), True),
    ("one item", batch(cached("one")), True),
    ("over an item", batch(cached("one", note={"S": "again"})), True),
    ("a boolean and a null", batch(cached("flags", hit={"BOOL": True}, gone={"NULL": True})), True),
    ("two items of one key", batch(cached("same"), cached("same", n={"N": "2"})), True),
    # Not plain, or refused: moto answers
    ("more than 25", batch(*(cached(f"x{i}") for i in range(26))), False),
    ("an item twice", batch(cached("twice"), cached("twice")), False),
    ("a delete", batch({"DeleteRequest": {"Key": cached("one")["PutRequest"]["Item"]}}), False),
    ("a set", batch(cached("set", tags={"SS": ["a"]})), False),
    ("a map", batch(cached("map", usage={"M": {"n": {"N": "1"}}})), False),
    ("an empty key", batch(cached("empty", tenant="")), False),
    ("a key missing", batch({"PutRequest": {"Item": {"tenant": {"S": "acme"}}}}), False),
    (
        "a key of the wrong type",
        batch({"PutRequest": {"Item": {"tenant": {"N": "1"}, "request_id": {"S": "n"}}}}),
        False,
    ),
    ("a capacity report", batch(cached("c"), ReturnConsumedCapacity="TOTAL"), False),
    ("a missing table", {"RequestItems": {"no-such-table": [cached("m")]}}, False),
    ("no entries", batch(), False),
]


def both_ways(
    moto: Client, fast: Client, target: str, request: Any, sides: dict[str, str] = SIDES
) -> tuple[Any, Any]:
    """``request`` (its table named ``TABLE``) sent to moto for one of twin tables and
    to the wrapper for the other: moto's answer, and the wrapper's with the table's
    name made moto's side's."""

    def on(side: str) -> Any:
        return json.loads(json.dumps(request).replace('"TABLE"', json.dumps(sides[side])))

    by_moto, by_fast = call(moto, target, on("moto")), call(fast, target, on("fast"))
    same_names = json.dumps(by_fast).replace(sides["fast"], sides["moto"])
    return json.loads(json.dumps(by_moto)), json.loads(same_names)


def _held(client: Client, table: str) -> list[Any]:
    status, answer = call(client, "Scan", {"TableName": table})
    assert status == 200, answer
    return sorted(answer["Items"], key=lambda item: item["request_id"]["S"])


@pytest.mark.parametrize(("what", "request_body", "direct"), SCRIPT, ids=[s[0] for s in SCRIPT])
def test_a_batch_write_answers_and_writes_what_moto_does(clients, what, request_body, direct):
    moto, fast, written = clients
    before = len(written)
    # WHEN the same batch goes to moto for one table, and to the wrapper for its twin
    by_moto, by_fast = both_ways(moto, fast, "BatchWriteItem", request_body)
    # THEN the answers are the same (but for the table's name), and so are the tables
    assert by_fast == by_moto, what
    assert _held(moto, SIDES["fast"]) == _held(moto, SIDES["moto"]), what
    # AND the plain ones were written directly, the rest left to moto
    assert (len(written) > before) is direct, what
