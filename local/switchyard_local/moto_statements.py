"""DynamoDB's BatchExecuteStatement of PartiQL INSERTs, in the local emulator.

A worker stores a batch's new results in one call: a BatchExecuteStatement of up to
25 ``INSERT INTO "<table>" VALUE {'<name>': ?, ...}`` statements, each with its item's
values as parameters (``DynamoDBResultStore.complete_new``, its statement written
by ``switchyard.results.insert_statement``). In DynamoDB an INSERT
never replaces an item: one whose key is taken fails with ``DuplicateItem``, on its
own, while the batch's other statements are applied (the batch is not a
transaction). The worker then stores that one result with a conditional put.

moto 5.2.5 cannot run these: its PartiQL parser takes no parameters in an INSERT's
value (it raises ``TypeError: Unsupported type Variable``), and each statement it
runs first copies every item of every table. What :func:`batch_insert` answers,
through ``moto_reads.wrap`` in the emulator's process: a BatchExecuteStatement
whose every statement is such an INSERT, with one parameter for each ``?``. Each
item is written with moto's own backend ``put_item``, on the condition that its key
is free (under ``moto_dynamodb``'s write lock, as every write), and checked as that
checks an item. Per statement, as DynamoDB answers: ``{"TableName"}``;
or with an ``Error`` of ``DuplicateItem`` (the key is taken), ``ResourceNotFound``
(no such table) or ``ValidationError`` (a key missing, empty or of the wrong type;
an item moto refuses). A request of any other form goes to moto unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from switchyard_local.moto_reads import backend_of

TARGET = "DynamoDB_20120810.BatchExecuteStatement"
MAX_STATEMENTS = 25  # DynamoDB's limit per BatchExecuteStatement
_INSERT = re.compile(
    r"INSERT INTO \"(?P<table>[A-Za-z0-9_.-]{3,255})\" VALUE "
    r"\{(?P<names>'[^'?]+' ?: ?\?(?:, ?'[^'?]+' ?: ?\?)*)\}"
)
_NAME = re.compile(r"'([^'?]+)' ?: ?\?")


def batch_insert(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a BatchExecuteStatement of INSERTs, or None for moto to answer."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or set(request) != {"Statements"}:
        return None
    statements = request["Statements"]
    if not isinstance(statements, list) or not 1 <= len(statements) <= MAX_STATEMENTS:
        return None
    parsed = []
    for statement in statements:
        one = parse_insert(statement)
        if one is None:
            return None
        parsed.append(one)
    backend = backend_of(environ)
    if backend is None:
        return None
    return json.dumps({"Responses": [_insert(backend, t, item) for t, item in parsed]}).encode()


def parse_insert(statement: Any) -> tuple[str, dict[str, Any]] | None:
    """The table and item of one statement of a BatchExecuteStatement, if it is an
    INSERT of the form above with one parameter for each ``?``; None otherwise."""
    if not isinstance(statement, dict) or set(statement) != {"Statement", "Parameters"}:
        return None
    text, values = statement["Statement"], statement["Parameters"]
    if not isinstance(text, str) or not isinstance(values, list):
        return None
    match = _INSERT.fullmatch(text)
    if match is None:
        return None
    names = _NAME.findall(match.group("names"))
    if len(names) != len(values) or len(set(names)) != len(names):
        return None
    if not all(isinstance(v, dict) and len(v) == 1 for v in values):
        return None
    return match.group("table"), dict(zip(names, values, strict=True))


def _insert(backend: Any, name: str, item: dict[str, Any]) -> dict[str, Any]:
    from moto.dynamodb.exceptions import ConditionalCheckFailed, DynamodbException

    table = backend.tables.get(name)
    if table is None:
        return _error(name, "ResourceNotFound", "Requested resource not found")
    types = {a["AttributeName"]: a["AttributeType"] for a in table.attr}
    keys = [table.hash_key_attr] + ([table.range_key_attr] if table.has_range_key else [])
    for key in keys:
        value = item.get(key)
        kind, text = next(iter(value.items())) if value else (None, None)
        if kind != types.get(key) or text in ("", None):
            return _error(
                name,
                "ValidationError",
                f"One or more parameter values were invalid: key attribute {key} is missing, "
                "empty or of the wrong type",
            )
    try:
        backend.put_item(
            name,
            item,
            condition_expression="attribute_not_exists(#k)",
            expression_attribute_names={"#k": table.hash_key_attr},
        )
    except ConditionalCheckFailed:
        return _error(name, "DuplicateItem", "Duplicate primary key exists in table")
    except DynamodbException as exc:
        return _error(name, "ValidationError", getattr(exc, "message", str(exc)))
    return {"TableName": name}


def _error(table: str, code: str, message: str) -> dict[str, Any]:
    return {"TableName": table, "Error": {"Code": code, "Message": message}}
