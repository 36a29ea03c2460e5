"""The emulator's BatchExecuteStatement of INSERTs and conditional UPDATEs
(``moto_statements``): each item is written as moto writes a PutItem of it, a taken
key (an INSERT) or an item without the status asked for (an UPDATE) fails its
statement alone, and any other form of the call goes to moto unchanged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard.results import insert_of, update_of_queued, update_statement
from tests.unit.test_moto_reads import RESULTS_KEYS, call, twins


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client]]:
    """moto's application and the wrapped one, over one results table."""
    moto, fast = twins()
    status, _ = call(
        moto,
        "CreateTable",
        {"TableName": "inserts", **RESULTS_KEYS},
    )
    assert status == 200
    yield moto, fast


def item(rid: str, **more: Any) -> dict[str, Any]:
    return {
        "tenant": {"S": "acme"},
        "request_id": {"S": rid},
        "status": {"S": "done"},
        "expires_at": {"N": "1795600000"},
        "outputs_f32": {"B": "AAECAw=="},
        "doc": {"S": '{"timings": {"compute_ms": 1.5}}'},
        **more,
    }


def statement(one: dict[str, Any], table: str = "inserts") -> dict[str, Any]:
    return insert_of(table, one)


def queued_update(
    one: dict[str, Any], removed: list[str], table: str = "inserts"
) -> dict[str, Any]:
    """The worker's UPDATE of ``one`` over its queued record (``complete_batch``)."""
    return update_of_queued(table, one, removed)


def queued(rid: str) -> dict[str, Any]:
    return {
        "tenant": {"S": "acme"},
        "request_id": {"S": rid},
        "status": {"S": "queued"},
        "expires_at": {"N": "1795600000"},
        "doc": {"S": "{}"},
        "failures": {"N": "2"},
        "last_failure": {"S": "v1: boom"},
    }


def get(client: Client, request_id: str) -> Any:
    key = {"tenant": {"S": "acme"}, "request_id": {"S": request_id}}
    return call(client, "GetItem", {"TableName": "inserts", "Key": key})


def test_inserted_items_read_back_as_put_items_do(clients):
    moto, fast = clients
    inserted, put = item("ins-1", note={"NULL": True}), item("put-1", note={"NULL": True})
    status, answer = call(fast, "BatchExecuteStatement", {"Statements": [statement(inserted)]})
    assert (status, answer) == (200, {"Responses": [{"TableName": "inserts"}]})
    assert call(moto, "PutItem", {"TableName": "inserts", "Item": put})[0] == 200
    got_inserted, got_put = get(moto, "ins-1"), get(moto, "put-1")
    assert got_inserted[1]["Item"].pop("request_id") == {"S": "ins-1"}
    assert got_put[1]["Item"].pop("request_id") == {"S": "put-1"}
    assert got_inserted == got_put


def test_a_taken_key_fails_its_statement_alone_and_keeps_its_item(clients):
    moto, fast = clients
    assert call(moto, "PutItem", {"TableName": "inserts", "Item": item("taken")})[0] == 200
    before = get(moto, "taken")
    batch = [
        statement(item("fresh-1")),
        statement(item("taken", status={"S": "error"})),
        statement(item("fresh-2")),
    ]
    status, answer = call(fast, "BatchExecuteStatement", {"Statements": batch})
    assert status == 200
    codes = [r.get("Error", {}).get("Code") for r in answer["Responses"]]
    assert codes == [None, "DuplicateItem", None]
    assert get(moto, "taken") == before
    assert get(moto, "fresh-1")[1]["Item"] == item("fresh-1")
    assert get(moto, "fresh-2")[1]["Item"] == item("fresh-2")


@pytest.mark.parametrize(
    ("one", "table", "code"),
    [
        (item("x"), "no-such-table", "ResourceNotFound"),
        ({"tenant": {"S": "acme"}, "status": {"S": "done"}}, "inserts", "ValidationError"),
        (item("x", tenant={"N": "1"}), "inserts", "ValidationError"),
        (item("x", request_id={"S": ""}), "inserts", "ValidationError"),
    ],
)
def test_a_statement_that_cannot_be_applied_fails_alone(clients, one, table, code):
    moto, fast = clients
    batch = [statement(one, table), statement(item(f"beside-{uuid.uuid4()}"))]
    status, answer = call(fast, "BatchExecuteStatement", {"Statements": batch})
    assert status == 200
    first, second = answer["Responses"]
    assert first["Error"]["Code"] == code
    assert "Error" not in second


def test_an_update_over_a_queued_record_leaves_the_item_a_put_would(clients):
    moto, fast = clients
    for rid in ("upd-1", "put-2"):
        assert call(moto, "PutItem", {"TableName": "inserts", "Item": queued(rid)})[0] == 200
    done = item("upd-1", note={"NULL": True})
    removed = ["failures", "last_failure", "error_code"]
    status, answer = call(
        fast, "BatchExecuteStatement", {"Statements": [queued_update(done, removed)]}
    )
    assert (status, answer) == (200, {"Responses": [{"TableName": "inserts"}]})
    put = item("put-2", note={"NULL": True})
    assert call(moto, "PutItem", {"TableName": "inserts", "Item": put})[0] == 200
    updated, written = get(moto, "upd-1")[1]["Item"], get(moto, "put-2")[1]["Item"]
    assert updated.pop("request_id") == {"S": "upd-1"}
    assert written.pop("request_id") == {"S": "put-2"}
    assert updated == written  # the queued record's failures are gone with it


def test_an_update_of_an_item_not_queued_fails_alone_and_keeps_it(clients):
    moto, fast = clients
    assert call(moto, "PutItem", {"TableName": "inserts", "Item": item("final")})[0] == 200
    assert call(moto, "PutItem", {"TableName": "inserts", "Item": queued("waiting")})[0] == 200
    before = get(moto, "final")
    batch = [
        queued_update(item("final", status={"S": "error"}), []),
        queued_update(item("never-queued"), []),  # no record at all
        queued_update(item("waiting"), ["failures", "last_failure"]),
    ]
    status, answer = call(fast, "BatchExecuteStatement", {"Statements": batch})
    assert status == 200
    codes = [r.get("Error", {}).get("Code") for r in answer["Responses"]]
    assert codes == ["ConditionalCheckFailed", "ConditionalCheckFailed", None]
    assert get(moto, "final") == before
    assert "Item" not in get(moto, "never-queued")[1]
    assert get(moto, "waiting")[1]["Item"] == item("waiting")


def moto_update_item(client: Client, one: dict[str, Any], removed: list[str]) -> tuple[Any, Any]:
    """The UpdateItem that the worker's UPDATE of ``one`` stands for, answered by
    moto itself: each attribute but the key set, ``removed`` removed, on the
    condition that the item's status is ``queued``."""
    rest = [n for n in one if n not in ("tenant", "request_id")]
    names = {f"#s{i}": n for i, n in enumerate(rest)}
    names |= {f"#r{i}": n for i, n in enumerate(removed)}
    expression = "SET " + ", ".join(f"#s{i} = :s{i}" for i in range(len(rest)))
    if removed:
        expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
    return call(
        client,
        "UpdateItem",
        {
            "TableName": "inserts",
            "Key": {"tenant": one["tenant"], "request_id": one["request_id"]},
            "UpdateExpression": expression,
            "ConditionExpression": "#c = :c",
            "ExpressionAttributeNames": {**names, "#c": "status"},
            "ExpressionAttributeValues": {
                **{f":s{i}": one[n] for i, n in enumerate(rest)},
                ":c": {"S": "queued"},
            },
        },
    )


@pytest.mark.parametrize(
    ("before", "after", "removed"),
    [
        # A result over a queued record that failed twice: its failures removed.
        (queued, lambda rid: item(rid), ["failures", "last_failure", "error_code"]),
        # Every plain type set; an attribute of the record left alone; a removal of
        # an attribute the item does not have.
        (
            lambda rid: {**queued(rid), "kept": {"L": [{"S": "a"}, {"N": "2"}]}},
            lambda rid: item(
                rid, note={"NULL": True}, flag={"BOOL": False}, n={"N": "-1.50"}, empty={"S": ""}
            ),
            ["outputs", "failures"],
        ),
        # No record yet, and a record already final: neither is written.
        (None, lambda rid: item(rid), []),
        (lambda rid: item(rid, status={"S": "cancelled"}), lambda rid: item(rid), []),
    ],
)
def test_an_update_leaves_what_motos_update_item_leaves(clients, before, after, removed):
    moto, fast = clients
    ours, theirs = f"ours-{uuid.uuid4()}", f"theirs-{uuid.uuid4()}"
    if before is not None:
        for rid in (ours, theirs):
            put = {"TableName": "inserts", "Item": before(rid)}
            assert call(moto, "PutItem", put)[0] == 200
    status, answer = call(
        fast, "BatchExecuteStatement", {"Statements": [queued_update(after(ours), removed)]}
    )
    assert status == 200
    failed = answer["Responses"][0].get("Error", {}).get("Code")
    moto_status, moto_answer = moto_update_item(moto, after(theirs), removed)
    if moto_status == 200:
        assert failed is None
    else:
        assert moto_answer["__type"].endswith("ConditionalCheckFailedException")
        assert failed == "ConditionalCheckFailed"
    mine, motos = get(moto, ours)[1].get("Item"), get(moto, theirs)[1].get("Item")
    if motos is None:
        assert mine is None
    else:
        assert mine["request_id"] == {"S": ours} and motos["request_id"] == {"S": theirs}
        assert {**mine, "request_id": None} == {**motos, "request_id": None}


@pytest.mark.parametrize(
    ("statement_of", "code"),
    [
        (lambda: queued_update(item("x"), [], table="no-such-table"), "ResourceNotFound"),
        (
            lambda: {
                "Statement": update_statement("inserts", ["status"], [], ("tenant", "status2")),
                "Parameters": [{"S": "done"}, {"S": "acme"}, {"S": "x"}, {"S": "queued"}],
            },
            "ValidationError",
        ),
    ],
)
def test_an_update_that_cannot_be_applied_fails_alone(clients, statement_of, code):
    _, fast = clients
    batch = [statement_of(), statement(item(f"beside-{uuid.uuid4()}"))]
    status, answer = call(fast, "BatchExecuteStatement", {"Statements": batch})
    assert status == 200
    first, second = answer["Responses"]
    assert first["Error"]["Code"] == code
    assert "Error" not in second


@pytest.mark.parametrize(
    "body",
    [
        {
            "Statements": [
                {
                    "Statement": 'SELECT * FROM "inserts" WHERE tenant = ?',
                    "Parameters": [{"S": "acme"}],
                }
            ]
        },  # fmt: skip
        {"Statements": [{"Statement": "INSERT INTO \"inserts\" VALUE {'tenant': 'acme'}"}]},
        {"Statements": [statement(item("y"))], "ReturnConsumedCapacity": "TOTAL"},
        {"Statements": [{**statement(item("z")), "Parameters": [{"S": "acme"}]}]},
        {"Statements": [statement(item(str(i))) for i in range(26)]},
        {"Statements": []},
        {
            "Statements": [
                {
                    "Statement": 'UPDATE "inserts" SET "status"=\'done\' WHERE "tenant"=? '
                    'AND "request_id"=? AND "status"=?',
                    "Parameters": [{"S": "acme"}, {"S": "x"}, {"S": "queued"}],
                }
            ]
        },
        {"Statements": [{**queued_update(item("w"), []), "Parameters": [{"S": "acme"}]}]},
    ],
)
def test_any_other_form_is_answered_by_moto(clients, body):
    moto, fast = clients
    assert call(fast, "BatchExecuteStatement", body) == call(moto, "BatchExecuteStatement", body)
