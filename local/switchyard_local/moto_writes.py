"""DynamoDB's BatchWriteItem of puts in the local emulator, written straight into
moto's tables.

The result cache stores a batch's outputs in BatchWriteItems of up to 25 puts
(``DynamoDBResultCache.put``), each item a key, packed outputs (binary) and a TTL.
moto 5.2.5 serves each call through Flask, its request parser and its response
serializer around 25 ``put_item`` calls, as it does for a single PutItem
(``moto_puts``).

What :func:`batch_write_item` answers, through ``moto_reads.wrap`` in the
emulator's process: a BatchWriteItem of the plain form (``RequestItems`` only: per
existing table, ``PutRequest`` entries alone, 1 to 25 in all, each item's
attributes strings, numbers, binaries, booleans or nulls, its key attributes there
and not empty, no item twice). It writes them as moto's handler does, one by one
through moto's backend ``put_item`` (under ``moto_dynamodb``'s write lock, as every
write), and answers what moto's handler answers. Anything else is moto's: a
``DeleteRequest``, a capacity or metrics report, a missing table, an item of
another type (a set, a map, a list), a key that is empty, and an item asked twice.
moto's backend may still refuse an item (a key of the wrong type, an item over
400 KB), having written the ones before it, as moto does: the call is then moto's
to answer from the start, which writes those same items again, unchanged, and
refuses the same one. ``tests/unit/test_moto_writes.py`` sends one script of
BatchWriteItems both ways and compares every answer and every item written.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard_local.moto_wire import key_names, plain_values, request_items

TARGET = "DynamoDB_20120810.BatchWriteItem"
_MOST_WRITES = 25  # DynamoDB's limit per BatchWriteItem
_PLAIN_TYPES = frozenset({"S", "N", "B", "BOOL", "NULL"})  # binaries as base64 text


def batch_write_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain BatchWriteItem, its items written; or None for moto to
    answer."""
    found = request_items(environ, body)
    if found is None:
        return None
    backend, batches = found
    puts = []
    for name, entries in batches.items():
        table = backend.tables.get(name)
        if table is None or not isinstance(entries, list) or not entries:
            return None
        for entry in entries:
            item = _put_item(entry)
            if item is None or not _keyed(item, key_names(table)):
                return None
            puts.append((name, item))
    texts = [json.dumps(item, sort_keys=True) for _, item in puts]
    if len(puts) > _MOST_WRITES or len(set(texts)) != len(texts):
        return None
    from moto.dynamodb.exceptions import DynamodbException

    try:
        for name, item in puts:
            backend.put_item(name, item)
    except DynamodbException:
        return None  # refused, the items before it written: moto's to answer
    capacity = [
        {"TableName": name, "CapacityUnits": 1.0, "Table": {"CapacityUnits": 1.0}}
        for name in batches
    ]
    answer = {"ConsumedCapacity": capacity, "ItemCollectionMetrics": {}, "UnprocessedItems": {}}
    return json.dumps(answer).encode()


def _put_item(entry: Any) -> dict[str, Any] | None:
    """The item of a ``{"PutRequest": {"Item": ...}}`` entry whose every attribute
    is one value of a plain type; None otherwise."""
    if not isinstance(entry, dict) or set(entry) != {"PutRequest"}:
        return None
    put = entry["PutRequest"]
    if not isinstance(put, dict) or set(put) != {"Item"} or not isinstance(put["Item"], dict):
        return None
    if not plain_values(put["Item"], _PLAIN_TYPES):
        return None
    return put["Item"]


def _keyed(item: dict[str, Any], keys: list[str]) -> bool:
    """Each of the table's key attributes in ``item``, and not empty."""
    return all(k in item and next(iter(item[k].values())) != "" for k in keys)
