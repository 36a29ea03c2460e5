"""DynamoDB's Query in the local emulator, of the form a stream's reader sends,
answered straight from moto's table.

A streamed generation's reader asks for the chunks after what it has, every 10 to
50 ms while it waits (``DynamoDBTokenStream.after``): one Query of the results
table, ``#pk = :t AND #sk BETWEEN :lo AND :hi`` in the tenant's partition, read
consistently. moto 5.2.5 serves each through Flask, its request parser, its
expression parser, a deep copy of every item found and its response serializer;
``moto_dynamodb`` already narrows the read to the partition.

What :func:`query` answers, through ``moto_reads.wrap`` in the emulator's process:
a Query of exactly that form (a table name, that key condition with its two names
naming the table's hash and range keys and its three values strings, the lower
bound not above the upper, optionally ``ConsistentRead``) on a table whose two keys
are strings. It reads the partition's keys, keeps those in the range, in key order,
and answers their items as moto does: ``{"Count", "ScannedCount", "Items"}``.
Anything else is moto's: another field (a ``Limit``, an ``ExclusiveStartKey``, a
filter, a projection, an index, ``ScanIndexForward``, a capacity report), another
key condition, a missing table, an item that is not plain (a map, a list, a set of
binaries), and an answer over moto's page of 1 MB, which moto cuts with a
``LastEvaluatedKey``. ``tests/unit/test_moto_queries.py`` sends one script of
Queries both ways and compares every answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from switchyard_local.moto_wire import json_request, plain_attributes, table_of

TARGET = "DynamoDB_20120810.Query"
_FIELDS = {
    "TableName",
    "KeyConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ConsistentRead",
}
_RANGE = re.compile(r"(#\w+) = (:\w+) AND (#\w+) BETWEEN (:\w+) AND (:\w+)")


def query(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a Query of the stream reader's form, or None for moto to answer."""
    request = json_request(body, _FIELDS)
    if request is None or not isinstance(request.get("ConsistentRead", False), bool):
        return None
    name, condition = request.get("TableName"), request.get("KeyConditionExpression")
    names, values = (
        request.get("ExpressionAttributeNames"),
        request.get("ExpressionAttributeValues"),
    )
    if not isinstance(name, str) or not isinstance(condition, str):
        return None
    matched = _RANGE.fullmatch(condition)
    if matched is None or not isinstance(names, dict) or not isinstance(values, dict):
        return None
    hash_name, hash_value, range_name, low, high = matched.groups()
    if set(names) != {hash_name, range_name} or set(values) != {hash_value, low, high}:
        return None
    strings = [_string(values[v]) for v in (hash_value, low, high)]
    if None in strings or strings[1] > strings[2]:  # type: ignore[operator]
        return None
    found = table_of(environ, name)
    if found is None:
        return None
    _, table = found
    types = {a["AttributeName"]: a["AttributeType"] for a in table.attr}
    keys = (table.hash_key_attr, table.range_key_attr)
    if (names[hash_name], names[range_name]) != keys or any(types.get(k) != "S" for k in keys):
        return None
    items = _in_range(table, *strings)  # type: ignore[arg-type]
    if items is None:
        return None
    return json.dumps({"Count": len(items), "ScannedCount": len(items), "Items": items}).encode()


def _in_range(table: Any, partition_key: str, low: str, high: str) -> list[Any] | None:
    """The items of a partition whose range key is from ``low`` to ``high``, in key
    order, as DynamoDB's JSON; None where one is not plain or they fill moto's page."""
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    partition = table.items.get(DynamoType({"S": partition_key}), {})
    # Its keys, not its (key, item) pairs: see moto_dynamodb's partition read.
    chosen = sorted(key.value for key in list(partition) if low <= key.value <= high)
    items, size = [], 0
    for key in chosen:
        item = partition.get(DynamoType({"S": key}))
        if item is None:
            continue  # deleted meanwhile
        size += item.size()
        attributes = plain_attributes(item.attrs)
        if attributes is None or size > RESULT_SIZE_LIMIT:
            return None
        items.append(attributes)
    return items


def _string(value: Any) -> str | None:
    """A value's string, if it is one non-empty string attribute value."""
    if not isinstance(value, dict) or set(value) != {"S"}:
        return None
    text = value["S"]
    return text if isinstance(text, str) and text else None
