"""DynamoDB's PutItem in the local emulator, written straight into moto's tables.

An async request costs the router a PutItem of its queued record; a burst of 1,000
one-sentence requests is 1,000 of them. moto 5.2.5 serves each through Flask, its
URL dispatch, its request parser (which walks the service's input shape attribute by
attribute) and its response serializer, for a write that is a dictionary assignment
under its lock; as with GetItem (``moto_reads``), the machinery is most of the
emulator's time.

What :func:`put_item` answers, through ``moto_reads.wrap`` in the emulator's
process: a PutItem of the plain form the platform sends (a table name, an item whose
attributes are all strings, numbers, booleans or nulls, optionally a
``ConditionExpression`` with its names and values), on a table that exists. It runs
moto's own checks of the item and of the condition (the same functions moto's
handler calls) and moto's own backend ``put_item``, under ``moto_dynamodb``'s write
lock as every write, and answers ``{}`` as moto does. Anything else goes to moto's
application unchanged: another field (``ReturnValues``, ``ReturnConsumedCapacity``,
``Expected``), an attribute of another type (a binary, a set, a map, a list), a
missing table, and any put that moto's checks refuse or whose condition fails, which
wrote nothing, so moto answers it from the same state with its own error.
``tests/unit/test_moto_puts.py`` sends one script of PutItems both ways and compares
every answer and every item written.
"""

from __future__ import annotations

from typing import Any

from switchyard_local.moto_wire import json_request, plain_values, table_of

TARGET = "DynamoDB_20120810.PutItem"
_FIELDS = {
    "TableName",
    "Item",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
}


def put_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain PutItem, written; or None for moto to answer (nothing
    written)."""
    request = json_request(body, _FIELDS)
    if request is None:
        return None
    name, item = request.get("TableName"), request.get("Item")
    if not isinstance(name, str) or not isinstance(item, dict) or not plain_values(item):
        return None
    condition = request.get("ConditionExpression")
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues")
    if condition is not None and not isinstance(condition, str):
        return None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        return None
    if values is not None and (
        not isinstance(values, dict) or not values or not plain_values(values)
    ):
        return None
    found = table_of(environ, name)
    if found is None:
        return None
    backend, table = found
    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.comparisons import create_condition_expression_parser
    from moto.dynamodb.exceptions import DynamodbException
    from moto.dynamodb.responses import (
        validate_attributes_used,
        validate_put_has_empty_attrs,
        validate_put_has_empty_keys,
        validate_put_has_gsi_keys_set_to_none,
    )

    try:
        validate_put_has_empty_keys(item, table)
        validate_put_has_empty_attrs(item, table)
        validate_put_has_gsi_keys_set_to_none(item, table)
        parser = create_condition_expression_parser(condition, names, values or {})
        parser.parse()
        validate_attributes_used(names, parser.expr_attr_names_found)
        backend.put_item(
            name,
            item,
            None,  # no Expected
            condition,
            names,
            values or {},
            condition is None,  # overwrite, as moto's handler sets it
            None,
        )
    except (DynamodbException, JsonRESTError):
        return None  # refused before writing: moto answers it, with its own error
    return b"{}"
