"""The emulator's direct GetItem and BatchGetItem answer what moto answers: a script
of each, plain and not, sent to moto's WSGI application and to it wrapped by
``moto_reads.wrap``, over the same tables; every answer compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from switchyard_local import moto_reads

REGION = "eu-west-1"


def headers(target: str, access_key: str = "local") -> dict[str, str]:
    return {
        "X-Amz-Target": f"DynamoDB_20120810.{target}",
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={access_key}/20261125/{REGION}/dynamodb/aws4_request, "
            "SignedHeaders=host;x-amz-date;x-amz-target, Signature=0"
        ),
        "Host": "127.0.0.1:5000",
    }


def call(client: Client, target: str, body: Any) -> tuple[Any, Any]:
    """The status and body of the answer; what moto raised where it raises (a server
    answers that with a 500)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        response = client.post("/", data=data, headers=headers(target))
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return "raised", repr(exc)
    text = response.get_data()
    return response.status_code, json.loads(text) if text else None


# The results table's key, as the platform provisions it.
RESULTS_KEYS = {
    "KeySchema": [
        {"AttributeName": "tenant", "KeyType": "HASH"},
        {"AttributeName": "request_id", "KeyType": "RANGE"},
    ],
    "AttributeDefinitions": [
        {"AttributeName": "tenant", "AttributeType": "S"},
        {"AttributeName": "request_id", "AttributeType": "S"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


@contextmanager
def answered_directly(module: Any, name: str) -> Iterator[list[str]]:
    """While it lasts, ``module.name`` (a direct path of the wrapper) logs each
    request it answered itself; wrap moto's application inside it."""
    real = getattr(module, name)
    answered: list[str] = []

    def counted(environ: dict[str, Any], body: bytes) -> bytes | None:
        answer = real(environ, body)
        if answer is not None:
            answered.append(body.decode())
        return answer

    setattr(module, name, counted)
    try:
        yield answered
    finally:
        setattr(module, name, real)


def twins() -> tuple[Client, Client]:
    """moto's application and the emulator's wrapping of it (its direct paths), each
    as a client; the wrapper takes the modules' functions as they are when it wraps."""
    moto_app = DomainDispatcherApplication(create_backend_app)
    return Client(moto_app), Client(moto_reads.wrap(moto_app))


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, dict[str, list[str]]]]:
    """moto's application and the wrapped one, over tables the scripts read; and a
    log, per call, of the GetItems and BatchGetItems the wrapped one answered itself."""
    with (
        answered_directly(moto_reads, "get_item") as gets,
        answered_directly(moto_reads, "batch_get_item") as batches,
    ):
        moto, fast = twins()
        yield from _with_tables(moto, fast, {"GetItem": gets, "BatchGetItem": batches})


def _with_tables(
    moto: Client, fast: Client, answered: dict[str, list[str]]
) -> Iterator[tuple[Client, Client, dict[str, list[str]]]]:
    for table, keys in (("results", ("tenant", "request_id")), ("single", ("pk",))):
        schema = [{"AttributeName": keys[0], "KeyType": "HASH"}]
        defs = [{"AttributeName": keys[0], "AttributeType": "S"}]
        if len(keys) == 2:
            schema.append({"AttributeName": keys[1], "KeyType": "RANGE"})
            defs.append({"AttributeName": keys[1], "AttributeType": "S"})
        status, _ = call(
            moto,
            "CreateTable",
            {
                "TableName": table,
                "KeySchema": schema,
                "AttributeDefinitions": defs,
                "BillingMode": "PAY_PER_REQUEST",
            },
        )
        assert status == 200
    items = [
        (
            "results",
            {
                "tenant": {"S": "acme"},
                "request_id": {"S": "plain"},
                "status": {"S": "done"},
                "doc": {"S": '{"outputs": [1.5, "é"]}'},
                "expires_at": {"N": "1795600000"},
                "failures": {"N": "0"},
                "cached": {"BOOL": False},
                "note": {"NULL": True},
                "tags": {"SS": ["a", "b"]},
                "sizes": {"NS": ["1", "2.5"]},
            },
        ),
        (
            "results",
            {
                "tenant": {"S": "acme"},
                "request_id": {"S": "nested"},
                "job": {"M": {"id": {"S": "j1"}, "chunk": {"N": "3"}}},
                "list": {"L": [{"S": "x"}, {"N": "1"}]},
            },
        ),
        ("results", {"tenant": {"S": "acme"}, "request_id": {"S": "binary"}, "b": {"B": "AAEC"}}),
        (
            "results",
            {"tenant": {"S": "acme"}, "request_id": {"S": "binary set"}, "bs": {"BS": ["AAEC"]}},
        ),
        ("single", {"pk": {"S": "one"}, "v": {"N": "-0.5"}}),
    ]
    for table, item in items:
        assert call(moto, "PutItem", {"TableName": table, "Item": item})[0] == 200
    yield moto, fast, answered


def key(request_id: str, tenant: str = "acme") -> dict[str, Any]:
    return {"tenant": {"S": tenant}, "request_id": {"S": request_id}}


# (what the GetItem asks, whether the direct path answers it itself)
SCRIPT: list[tuple[Any, bool]] = [
    ({"TableName": "results", "Key": key("plain")}, True),
    ({"TableName": "results", "Key": key("plain"), "ConsistentRead": True}, True),
    ({"TableName": "results", "Key": key("absent")}, True),
    ({"TableName": "results", "Key": key("plain", tenant="globex")}, True),
    ({"TableName": "single", "Key": {"pk": {"S": "one"}}}, True),
    ({"TableName": "single", "Key": {"pk": {"S": "two"}}}, True),
    ({"TableName": "results", "Key": key("binary")}, True),
    # Not plain: moto answers
    ({"TableName": "results", "Key": key("nested")}, False),
    ({"TableName": "results", "Key": key("binary set")}, False),
    ({"TableName": "missing", "Key": key("plain")}, False),
    ({"TableName": "results", "Key": {"tenant": {"S": "acme"}}}, False),
    ({"TableName": "results", "Key": {**key("plain"), "status": {"S": "done"}}}, False),
    ({"TableName": "results", "Key": {"tenant": {"S": "acme"}, "request_id": {"S": ""}}}, False),
    ({"TableName": "single", "Key": {"pk": {"N": "1"}}}, True),
    ({"TableName": "single", "Key": {"pk": {"B": "AAEC"}}}, False),
    ({"TableName": "results", "Key": key("plain"), "ProjectionExpression": "doc"}, False),
    ({"TableName": "results", "Key": key("plain"), "ReturnConsumedCapacity": "TOTAL"}, False),
    ({"TableName": "results", "Key": key("plain"), "ConsistentRead": "yes"}, False),
    ({"TableName": "results"}, False),
    ({"Key": key("plain")}, False),
    (b"{not json", False),
    ([1, 2], False),
]


def test_other_calls_pass_through_untouched(clients):
    moto, fast, _ = clients
    body = {"TableName": "results", "KeyConditionExpression": "tenant = :t"}
    body["ExpressionAttributeValues"] = {":t": {"S": "acme"}}
    assert call(fast, "Query", body) == call(moto, "Query", body)
    assert call(fast, "DescribeTable", {"TableName": "single"})[0] == 200


def test_an_item_written_is_read_back_at_once(clients):
    moto, fast, _ = clients
    item = {"pk": {"S": "fresh"}, "status": {"S": "queued"}}
    assert call(fast, "PutItem", {"TableName": "single", "Item": item})[0] == 200
    assert call(fast, "GetItem", {"TableName": "single", "Key": {"pk": {"S": "fresh"}}}) == (
        200,
        {"Item": item},
    )


def statuses_of(*request_ids: str, table: str = "results", **more: Any) -> dict[str, Any]:
    """A BatchGetItem as the worker reads a batch's statuses (``ResultStore.statuses``)."""
    return {
        "RequestItems": {
            table: {
                "Keys": [key(r) for r in request_ids],
                "ProjectionExpression": "#pk, #sk, #st",
                "ExpressionAttributeNames": {"#pk": "tenant", "#sk": "request_id", "#st": "status"},
                "ConsistentRead": True,
                **more,
            }
        }
    }


def whole(*request_ids: str, **more: Any) -> dict[str, Any]:
    """A BatchGetItem of whole items, as a router reads many requests' records
    (``ResultStore.get_many``) and a reader the next chunks of many streams."""
    return {"RequestItems": {"results": {"Keys": [key(r) for r in request_ids], **more}}}


def projected(projection: str, names: dict[str, str]) -> dict[str, Any]:
    return statuses_of("plain", ProjectionExpression=projection, ExpressionAttributeNames=names)


# (what the BatchGetItem asks, whether the direct path answers it itself)
BATCH_SCRIPT: list[tuple[Any, bool]] = [
    (statuses_of("plain", "absent", "binary", "nested"), True),  # the nested map not projected
    (statuses_of("absent"), True),
    (projected("#d,#e", {"#d": "doc", "#e": "expires_at"}), True),
    (statuses_of("binary", ProjectionExpression="#b", ExpressionAttributeNames={"#b": "b"}), True),
    (
        {
            "RequestItems": {
                **statuses_of("plain")["RequestItems"],
                "single": {
                    "Keys": [{"pk": {"S": "one"}}, {"pk": {"S": "two"}}],
                    "ProjectionExpression": "#v",
                    "ExpressionAttributeNames": {"#v": "v"},
                },
            }
        },
        True,
    ),
    (statuses_of(*(f"r{i}" for i in range(100))), True),
    (whole("plain", "absent", "binary", ConsistentRead=True), True),
    (whole("plain"), True),
    # Not plain, or an error: moto answers
    (statuses_of(*(f"r{i}" for i in range(101))), False),
    (statuses_of("plain", "plain"), False),
    (whole("plain", "nested"), False),
    (whole("binary set"), False),
    (whole("plain", ExpressionAttributeNames={"#d": "doc"}), False),
    (whole("plain", ProjectionExpression="doc"), False),
    (
        statuses_of("nested", ProjectionExpression="#j", ExpressionAttributeNames={"#j": "job"}),
        False,
    ),
    (statuses_of("plain", table="missing"), False),
    (statuses_of("plain", ReturnConsumedCapacity="TOTAL"), False),
    ({**statuses_of("plain"), "ReturnConsumedCapacity": "TOTAL"}, False),
    (projected("doc", {}), False),
    (projected("#d", {"#d": "doc", "#x": "unused"}), False),
    (projected("#d, #e", {"#d": "doc"}), False),
    (projected("#d.x", {"#d": "doc"}), False),
    (statuses_of("plain", ConsistentRead="yes"), False),
    (statuses_of(), False),
    ({"RequestItems": {"results": {"Keys": [{"tenant": {"S": "acme"}}]}}}, False),
    ({"RequestItems": {}}, False),
    (b"{not json", False),
]


@pytest.mark.parametrize(
    ("target", "request_body", "direct"),
    [("GetItem", *case) for case in SCRIPT] + [("BatchGetItem", *case) for case in BATCH_SCRIPT],
)
def test_a_read_is_answered_as_moto_answers_it(clients, target, request_body, direct):
    moto, fast, answered = clients
    before = len(answered[target])
    assert call(fast, target, request_body) == call(moto, target, request_body)
    assert (len(answered[target]) > before) is direct
