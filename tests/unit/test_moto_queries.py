"""The emulator's direct Query answers what moto answers: one script of Queries, of
the stream reader's form and not, sent to moto's WSGI application and to it wrapped
by ``moto_reads.wrap``, over the same table; every answer compared."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_queries
from tests.unit.test_moto_reads import RESULTS_KEYS, answered_directly, call, twins

# Names of this module's own: moto's backends are shared by every test in the process.
TABLE, KEYLESS = "query-results", "query-single"


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, list[str]]]:
    """moto's application and the wrapped one, over a results table holding three
    streams' chunks among other records; a log of the Queries the wrapped one
    answered itself."""
    with answered_directly(moto_queries, "query") as answered:
        moto, fast = twins()
        assert call(moto, "CreateTable", {"TableName": TABLE, **RESULTS_KEYS})[0] == 200
        single = {
            "TableName": KEYLESS,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        }
        assert call(moto, "CreateTable", single)[0] == 200
        items = [chunk("acme", "s1", 8 * i) for i in range(6)]
        items += [chunk("acme", "s2", 0), chunk("globex", "s1", 0)]
        items += [chunk("acme", "s3", 8 * i) for i in reversed(range(4))]  # written last first
        items += [
            {"tenant": {"S": "acme"}, "request_id": {"S": "s0"}, "status": {"S": "done"}},
            {**chunk("acme", "nested", 0), "usage": {"M": {"tokens": {"N": "8"}}}},
            {**chunk("acme", "binary", 0), "packed": {"B": "AAEC"}},
        ]
        # Three items of 350 KB: more than moto's page of 1 MB.
        items += [{**chunk("acme", "big", i), "pad": {"S": "x" * 350_000}} for i in range(3)]
        for item in items:
            assert call(moto, "PutItem", {"TableName": TABLE, "Item": item})[0] == 200
        yield moto, fast, answered
        for name in (TABLE, KEYLESS):  # moto's tables outlive the module
            call(moto, "DeleteTable", {"TableName": name})


def chunk(tenant: str, request_id: str, start: int) -> dict[str, Any]:
    """A chunk of a stream, as ``DynamoDBTokenStream.put`` writes it."""
    return {
        "tenant": {"S": tenant},
        "request_id": {"S": f"{request_id}#t{start:06d}"},
        "chunk": {"S": f'{{"start":{start},"ids":[1,2],"pieces":["a","b"]}}'},
        "expires_at": {"N": "1795600000"},
    }


def after(request_id: str, start: int, tenant: str = "acme", **more: Any) -> dict[str, Any]:
    """The Query of ``DynamoDBTokenStream.after``: the chunks from ``start`` on."""
    return {
        "TableName": TABLE,
        "KeyConditionExpression": "#pk = :t AND #sk BETWEEN :lo AND :hi",
        "ExpressionAttributeNames": {"#pk": "tenant", "#sk": "request_id"},
        "ExpressionAttributeValues": {
            ":t": {"S": tenant},
            ":lo": {"S": f"{request_id}#t{start:06d}"},
            ":hi": {"S": f"{request_id}#t~"},
        },
        "ConsistentRead": True,
        **more,
    }


def values(request_id: str, **changed: Any) -> dict[str, Any]:
    return {**after(request_id, 0)["ExpressionAttributeValues"], **changed}


SCRIPT: list[tuple[str, Any, bool]] = [
    # (what, the Query, answered directly)
    ("a stream's chunks from the start", after("s1", 0), True),
    ("its last chunks", after("s1", 24), True),
    ("chunks written out of order", after("s3", 8), True),
    ("past its end", after("s1", 48), True),
    ("another tenant's stream", after("s1", 0, "globex"), True),
    ("a tenant with no items", after("s1", 0, "initech"), True),
    (
        "without ConsistentRead",
        {k: v for k, v in after("s2", 0).items() if k != "ConsistentRead"},
        True,
    ),
    ("a binary attribute", after("binary", 0), True),
    # Not of the form, or not plain: moto answers
    ("a map in an item", after("nested", 0), False),
    ("more than moto's page", after("big", 0), False),
    ("with a limit", after("s1", 0, Limit=2), False),
    ("backwards", after("s1", 0, ScanIndexForward=False), False),
    ("from a start key", after("s1", 0, ExclusiveStartKey=chunk("acme", "s1", 8)), False),
    ("a capacity report", after("s1", 0, ReturnConsumedCapacity="TOTAL"), False),
    ("a projection", after("s1", 0, ProjectionExpression="#sk"), False),
    ("ConsistentRead not a boolean", after("s1", 0, ConsistentRead="yes"), False),
    (
        "bounds the wrong way",
        after(
            "s1",
            0,
            ExpressionAttributeValues=values(
                "s1", **{":lo": {"S": "s1#t~"}, ":hi": {"S": "s1#t000000"}}
            ),
        ),
        False,
    ),
    (
        "a number for a key",
        after("s1", 0, ExpressionAttributeValues=values("s1", **{":t": {"N": "1"}})),
        False,
    ),
    (
        "an empty bound",
        after("s1", 0, ExpressionAttributeValues=values("s1", **{":lo": {"S": ""}})),
        False,
    ),
    (
        "an unused value",
        after("s1", 0, ExpressionAttributeValues=values("s1", **{":x": {"S": "x"}})),
        False,
    ),
    (
        "names the wrong way round",
        after("s1", 0, ExpressionAttributeNames={"#pk": "request_id", "#sk": "tenant"}),
        False,
    ),
    ("another condition", after("s1", 0, KeyConditionExpression="#pk = :t AND #sk >= :lo"), False),
    ("a missing table", after("s1", 0, TableName="missing"), False),
    ("a table without a range key", after("s1", 0, TableName=KEYLESS), False),
    ("a filter", after("s1", 0, FilterExpression="attribute_exists(#sk)"), False),
]


@pytest.mark.parametrize(("what", "request_body", "direct"), SCRIPT, ids=[s[0] for s in SCRIPT])
def test_a_query_is_answered_as_moto_answers_it(clients, what, request_body, direct):
    moto, fast, answered = clients
    before = len(answered)
    # WHEN the same Query goes to moto and to the wrapped application
    by_fast, by_moto = call(fast, "Query", request_body), call(moto, "Query", request_body)
    # THEN the answers are the same, and the plain ones were answered directly
    assert by_fast == by_moto, what
    assert (len(answered) > before) is direct, what
