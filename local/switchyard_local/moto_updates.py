"""DynamoDB's UpdateItem in the local emulator, without moto's request machinery.

The platform's counters are conditional UpdateItems: a tenant's queued work
(``DynamoDBQueuedCounts``: ``ADD`` under a cap, ``ReturnValues`` ``ALL_NEW``), its
concurrency slots, a job's chunks, a failed attempt's count. moto 5.2.5 serves each
through Flask, its request parser and its response serializer around its backend's
``update_item`` (which parses the expressions and applies them).

What :func:`update_item` answers, through ``moto_reads.wrap`` in the emulator's
process: an UpdateItem of the plain form (a table name, a key of string or number
attributes naming exactly the table's key, an ``UpdateExpression``, optionally a
``ConditionExpression``, their names and values, each value a string, number,
boolean or null, ``ReturnValues`` of ``NONE``, ``ALL_NEW`` or ``ALL_OLD``,
``ReturnValuesOnConditionCheckFailure``) on a table that exists, whose item, if
there is one, holds plain attributes (``moto_wire.plain_attributes``). It makes
the checks moto's handler makes (the expressions parsed, every name and value
used), then calls moto's backend ``update_item`` with what that handler passes, and
answers as it answers: the capacity moto reports for every UpdateItem, and the item
after or before the update where asked. The item is read and updated under
``moto_dynamodb``'s write lock, so the item before is the one the update changed.
Anything else is moto's, and so is an update moto refuses: a failed condition, a
bad expression, a type that does not add up; moto refuses those before it writes,
so it answers them from the same state with its own error.
``tests/unit/test_moto_updates.py`` sends one script of UpdateItems both ways and
compares every answer and every item after.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard_local.moto_dynamodb import write_lock
from switchyard_local.moto_wire import (
    json_request,
    key_names,
    plain_attributes,
    plain_key,
    plain_values,
    table_of,
)

TARGET = "DynamoDB_20120810.UpdateItem"
_FIELDS = {
    "TableName",
    "Key",
    "UpdateExpression",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ReturnValues",
    "ReturnValuesOnConditionCheckFailure",
}
_RETURNED = {"NONE", "ALL_NEW", "ALL_OLD"}


def update_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain UpdateItem, applied; or None for moto to answer
    (nothing written)."""
    request = json_request(body, _FIELDS)
    if request is None:
        return None
    name, key, expression = (
        request.get("TableName"),
        request.get("Key"),
        request.get("UpdateExpression"),
    )
    if not isinstance(name, str) or not isinstance(key, dict) or not plain_key(key):
        return None
    if not isinstance(expression, str) or not expression.strip():
        return None
    returned = request.get("ReturnValues", "NONE")
    on_failure = request.get("ReturnValuesOnConditionCheckFailure")
    condition = request.get("ConditionExpression")
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues", {})
    if returned not in _RETURNED or on_failure not in (None, "NONE", "ALL_OLD"):
        return None
    if condition is not None and not isinstance(condition, str):
        return None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        return None
    if not isinstance(values, dict) or not plain_values(values):
        return None
    if "ExpressionAttributeValues" in request and not values:
        return None  # moto's error: values given empty
    if not all(isinstance(v, str) and v.startswith(":") for v in values):
        return None
    found = table_of(environ, name)
    if found is None:
        return None
    backend, table = found
    if set(key) != set(key_names(table)) or not _parsed(
        expression.strip(), condition, names, values
    ):
        return None
    with write_lock:
        before = backend.get_item(name, key)
        old = {} if before is None else plain_attributes(before.attrs)
        if old is None:
            return None  # an item moto's serializer is to answer
        try:
            item = backend.update_item(
                name,
                key,
                update_expression=expression.strip(),
                attribute_updates=None,
                expression_attribute_names=names,
                expression_attribute_values=values,
                expected=None,
                condition_expression=condition,
                return_values_on_condition_check_failure=on_failure,
            )
        except Exception:  # noqa: BLE001 - refused before writing: moto answers it
            return None
        new = plain_attributes(item.attrs)
    answer: dict[str, Any] = {"ConsumedCapacity": {"TableName": name, "CapacityUnits": 0.5}}
    if returned == "ALL_NEW":
        answer["Attributes"] = new
    elif returned == "ALL_OLD" and old:
        answer["Attributes"] = old
    return json.dumps(answer).encode()


# What _parsed found, by the expressions and the placeholders given: the platform
# sends a few forms again and again with other names' values (a slot's id) and
# other values, and parsing them is a quarter of an UpdateItem here (232 µs a call).
# A form this accepts that moto's update refuses after all is still answered by
# moto: its update raises before it writes.
_PARSED: dict[tuple[str, str | None, frozenset[str], frozenset[str]], bool] = {}
_PARSED_MOST = 256


def _parsed(
    expression: str, condition: str | None, names: dict[str, str], values: dict[str, Any]
) -> bool:
    """Whether the update and condition expressions parse, and use every name and
    value given, as moto's handler checks before it updates (kept by the forms)."""
    form = (expression, condition, frozenset(names), frozenset(values))
    found = _PARSED.get(form)
    if found is None:
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        found = _PARSED[form] = _parses(expression, condition, names, values)
    return found


def _parses(
    expression: str, condition: str | None, names: dict[str, str], values: dict[str, Any]
) -> bool:
    from moto.dynamodb.comparisons import create_condition_expression_parser
    from moto.dynamodb.parsing.expressions import (  # type: ignore[attr-defined]
        ExpressionAttributeName,
        ExpressionAttributeValue,
        UpdateExpressionParser,
    )
    from moto.dynamodb.responses import validate_attributes_used

    try:
        ast = UpdateExpressionParser.make(expression)
        names_used = [
            a.get_attribute_name_placeholder() for a in ast.find_clauses([ExpressionAttributeName])
        ]
        values_used = [a.get_value_name() for a in ast.find_clauses([ExpressionAttributeValue])]
        parser = create_condition_expression_parser(condition, names, values)
        parser.parse()
        validate_attributes_used(names, names_used + parser.expr_attr_names_found)
        validate_attributes_used(values, values_used + parser.expr_attr_values_found, "Values")
    except Exception:  # noqa: BLE001 - moto's error to give
        return False
    return True
