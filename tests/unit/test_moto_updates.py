"""The emulator's direct UpdateItem applies and answers what moto does: one script of
UpdateItems, plain and not, each sent to moto's WSGI application for one table and
to it wrapped by ``moto_reads.wrap`` for a twin table; every answer, and the item
each holds after, compared. The platform's counters' forms are evaluated by the
emulator itself, the others by moto's backend; the script says which."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from werkzeug.test import Client

from switchyard_local import moto_updates
from tests.unit.test_moto_reads import RESULTS_KEYS, answered_directly, call, twins
from tests.unit.test_moto_writes import both_ways

SIDES = {"moto": "updates-by-moto", "fast": "updates-by-fast"}


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Client, Client, list[str], list[Any]]]:
    """moto's application and the wrapped one, each with its twin table (a record
    holding a map among them); a log of the UpdateItems the wrapped one applied, and
    one of the items it evaluated itself (not by moto's backend)."""
    with answered_directly(moto_updates, "update_item") as applied, evaluated_here() as own:
        moto, fast = twins()
        for table in SIDES.values():
            assert call(moto, "CreateTable", {"TableName": table, **RESULTS_KEYS})[0] == 200
            mapped = {**key("mapped"), "job": {"M": {"chunks": {"N": "3"}}}}
            assert call(moto, "PutItem", {"TableName": table, "Item": mapped})[0] == 200
        yield moto, fast, applied, own
        for table in SIDES.values():  # moto's tables outlive the module
            call(moto, "DeleteTable", {"TableName": table})


@contextmanager
def evaluated_here() -> Iterator[list[Any]]:
    """While it lasts, each item the emulator's own evaluation of an update stored."""
    real = moto_updates._written
    stored: list[Any] = []

    def logged(backend: Any, table: str, key: Any, old: Any, after: Any, returned: str) -> Any:
        stored.append(after)
        return real(backend, table, key, old, after, returned)

    moto_updates._written = logged
    try:
        yield stored
    finally:
        moto_updates._written = real


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


def slots(
    expiries: dict[str, str] | None = None,
    under: str = "2",
    change: str = "1",
    gone: tuple[str, ...] = (),
    ttl: str = "1795600600",
) -> dict[str, Any]:
    """``DynamoDBSlotStore.take``: sync slots (name: the expiry it is held until) taken
    together under a cap (``under``), the count changed by ``change`` (less the
    expired ones reclaimed, ``gone``, removed on condition that they are there)."""
    expiries = expiries or {"s_a1": "1795600000.250"}
    names = {f"#slot{i}": name for i, name in enumerate(expiries)}
    names.update({f"#gone{i}": name for i, name in enumerate(gone)})
    sets = ", ".join(f"#slot{i} = :expiry{i}" for i in range(len(expiries)))
    update = f"SET {sets}, #ttl = :ttl ADD #held :change"
    condition = "(attribute_not_exists(#held) OR #held < :under)"
    if gone:
        update += " REMOVE " + ", ".join(f"#gone{i}" for i in range(len(gone)))
        condition += "".join(f" AND attribute_exists(#gone{i})" for i in range(len(gone)))
    return {
        "TableName": "TABLE",
        "Key": key("admission#sync"),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {"#held": "held", **names, "#ttl": "expires_at"},
        "ExpressionAttributeValues": {
            **{f":expiry{i}": {"N": e} for i, e in enumerate(expiries.values())},
            ":under": {"N": under},
            ":change": {"N": change},
            ":ttl": {"N": ttl},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def slots_given_back(*names: str) -> dict[str, Any]:
    """``DynamoDBSlotStore.give_back``: slots removed and counted off, on condition
    that each is still there."""
    placeholders = {f"#s{i}": name for i, name in enumerate(names)}
    return {
        "TableName": "TABLE",
        "Key": key("admission#sync"),
        "UpdateExpression": f"REMOVE {', '.join(placeholders)} ADD #held :minus",
        "ConditionExpression": " AND ".join(f"attribute_exists({p})" for p in placeholders),
        "ExpressionAttributeNames": {**placeholders, "#held": "held"},
        "ExpressionAttributeValues": {":minus": {"N": str(-len(names))}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def counted(expression: str, condition: str | None, values: dict[str, Any], **more: Any) -> dict:
    """An update of the counters' item ``c``, by the names ``#a`` and ``#b`` it uses."""
    used = expression + (condition or "")
    body = {
        "TableName": "TABLE",
        "Key": key("c"),
        "UpdateExpression": expression,
        "ExpressionAttributeNames": {n: n[1:] for n in ("#a", "#b") if n in used},
        "ExpressionAttributeValues": values,
        "ReturnValues": "ALL_NEW",
        **more,
    }
    if condition is not None:
        body["ConditionExpression"] = condition
    return body


SCRIPT: list[tuple[str, Any, bool, bool]] = [
    # (what, the request, its table named TABLE, applied directly, evaluated here)
    ("the first take", take(3), True, True),
    ("a second take", take(3), True, True),
    ("a take at the cap", take(2), False, False),
    ("a give back", give_back(), True, True),
    ("a give back, the item before asked", give_back(ReturnValues="ALL_OLD"), True, True),
    ("a slot taken", slots(), True, True),
    ("a slot taken at the cap", slots({"s_a1": "1795600001"}, under="1"), False, False),
    (
        "an expired slot reclaimed",
        slots({"s_b2": "1795600002"}, change="0", gone=("s_a1",)),
        True,
        True,
    ),
    ("another slot taken", slots({"s_c3": "1795600003"}, under="3"), True, True),
    ("two slots given back in one update", slots_given_back("s_b2", "s_c3"), True, True),
    (
        "two slots taken in one update",
        slots({"s_e5": "1795600005", "s_f6": "1795600006.5"}, change="2", ttl="1795600606"),
        True,
        True,
    ),
    ("the two given back", slots_given_back("s_e5", "s_f6"), True, True),
    ("a third slot taken", slots({"s_d4": "1795600004"}, under="3"), True, True),
    ("a slot given back twice, with one held", slots_given_back("s_b2", "s_d4"), False, False),
    ("the one held given back alone", slots_given_back("s_d4"), True, True),
    ("a new item, counted", counted("ADD #a :n", None, {":n": {"N": "2"}}), True, True),
    (
        "decimals added",
        counted("ADD #a :n, #b :m", None, {":n": {"N": "1.50"}, ":m": {"N": "-0.25"}}),
        True,
        True,
    ),
    (
        "clauses in lower case",
        counted("set #b = :s add #a :n", None, {":s": {"S": "x"}, ":n": {"N": "1"}}),
        True,
        True,
    ),
    (
        "strings compared",
        counted(
            "SET #a = :n",
            "#b = :s OR #b > :t",
            {":n": {"N": "7"}, ":s": {"S": "x"}, ":t": {"S": "y"}},
        ),
        True,
        True,
    ),
    (
        "a failed comparison of strings",
        counted("SET #a = :n", "#b >= :t AND #a <= :n", {":n": {"N": "7"}, ":t": {"S": "y"}}),
        False,
        False,
    ),
    (
        "AND before OR",
        counted(
            "SET #a = :n",
            "#b = :s OR #a = :m AND #b = :t",
            {":n": {"N": "9"}, ":s": {"S": "x"}, ":m": {"N": "7"}, ":t": {"S": "y"}},
        ),
        True,
        True,
    ),
    (
        "numbers compared",
        counted("REMOVE #b", "((#a <= :n) AND #a <> :m)", {":n": {"N": "9.0"}, ":m": {"N": "8"}}),
        True,
        True,
    ),
    # moto's backend: forms not evaluated here
    ("a failure on no record", failed("r1"), True, False),
    ("a second failure", failed("r1", ReturnValues="ALL_OLD"), True, False),
    ("the item before, of no item", failed("r2", ReturnValues="ALL_OLD"), True, False),
    ("a plain SET", failed("r3", ReturnValues="NONE"), True, False),
    (
        "unequal to a missing attribute",
        counted("SET #a = :n", "#b <> :n", {":n": {"N": "1"}}),
        True,
        False,
    ),
    (
        "NOT in a condition",
        counted("SET #a = :n", "NOT attribute_exists(#b)", {":n": {"N": "1"}}),
        True,
        False,
    ),
    # Not plain, or refused: moto answers
    (
        "a number compared with a string",
        counted("SET #a = :n", "#a < :s", {":n": {"N": "1"}, ":s": {"S": "1"}}),
        False,
        False,
    ),
    (
        "a key attribute set",
        {
            **counted("SET #a = :s", None, {":s": {"S": "d"}}),
            "ExpressionAttributeNames": {"#a": "request_id"},
        },
        False,
        False,
    ),
    (
        "one attribute in two clauses",
        counted("SET #a = :n ADD #a :n", None, {":n": {"N": "1"}}),
        False,
        False,
    ),
    ("the updated attributes asked", give_back(ReturnValues="UPDATED_NEW"), False, False),
    ("a capacity report", give_back(ReturnConsumedCapacity="TOTAL"), False, False),
    ("an item holding a map", failed("mapped"), False, False),
    (
        "a name not used",
        give_back(ExpressionAttributeNames={"#held": "held", "#step": "q_100", "#x": "x"}),
        False,
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
        False,
    ),
    ("an expression that does not parse", give_back(UpdateExpression="ADD #held"), False, False),
    ("no values", give_back(ExpressionAttributeValues={}), False, False),
    (
        "a string added to a number",
        give_back(
            ExpressionAttributeValues={
                ":minus": {"S": "x"},
                ":count": {"N": "1"},
            }
        ),
        False,
        False,
    ),
    ("a key missing its range", give_back(Key={"tenant": {"S": "acme"}}), False, False),
    (
        "a set value",
        give_back(
            ExpressionAttributeValues={
                ":minus": {"NS": ["1"]},
                ":count": {"N": "1"},
            }
        ),
        False,
        False,
    ),
    ("a missing table", {**give_back(), "TableName": "no-such-table"}, False, False),
]


@pytest.mark.parametrize(
    ("what", "request_body", "direct", "here"), SCRIPT, ids=[s[0] for s in SCRIPT]
)
def test_an_update_answers_and_applies_what_moto_does(clients, what, request_body, direct, here):
    moto, fast, applied, own = clients
    before, evaluated = len(applied), len(own)
    # WHEN the same update goes to moto for one table, and to the wrapper for its twin
    by_moto, by_fast = both_ways(moto, fast, "UpdateItem", request_body, SIDES)
    # THEN the answers are the same (but for the table's name), and so are the items
    assert by_fast == by_moto, what
    items = {
        side: call(moto, "GetItem", {"TableName": table, "Key": request_body.get("Key", {})})
        for side, table in SIDES.items()
    }
    assert items["fast"] == items["moto"], what
    # AND the plain ones were applied directly, the rest left to moto; the platform's
    # counters' forms evaluated by the emulator, not by moto's backend
    assert (len(applied) > before) is direct, what
    assert (len(own) > evaluated) is here, what
