"""DynamoDB's GetItem in the local emulator, answered straight from moto's tables.

A sync request's answer is read by the router with GetItem, several times a request
(its looks, until the worker's result is there): at 20 sync requests a second, 3.4
looks a request were two thirds of the emulator's calls. moto 5.2.5 serves each one
through Flask, its URL dispatch, its request parser and its response serializer,
which walks the service's output shape attribute by attribute; the read of the item
itself is under a tenth of that (profiled under load: the table lookup 0.9 % of the
emulator's time, its request machinery over 80 %).

What :func:`wrap` changes, around moto's WSGI application in the emulator's
process (``switchyard_local.emulator``): a GetItem of the plain form the platform
sends (a table name, a key of string or number attributes naming exactly the
table's key, optionally ``ConsistentRead``), on a table that exists, for an item
whose attributes are all of the plain types (S, N, BOOL, NULL, SS, NS, B: a result's
packed outputs are binary), is answered
from moto's own backend (``DynamoDBBackend.get_item``), with what moto answers:
``{"Item": ...}``, or ``{}`` for no item. Every other request, and any of these
that is not plain in every respect (a projection, a capacity report, a missing
table, a key that does not match, an item holding a map, a list or a set of
binaries), goes to
moto's application unchanged, so errors and edge cases answer exactly as before.
``tests/unit/test_moto_reads.py`` sends one script of GetItems both ways and
compares every answer.

A worker reads the status of each request of a batch before it runs it, in one
BatchGetItem of up to 100 keys projected to the key and the status: moto took
0.38 ms a key (9.5 ms for 25), the most costly call on a worker's path; a router
reads whole records of many requests (``DynamoDBResultStore.get_many``) and a
stream's reader the next chunks of many streams (``DynamoDBTokenStream.at``) the
same way, unprojected. A BatchGetItem of either plain form (:func:`batch_get_item`)
is answered the same way, item by item from the backend; anything else, and any
error, is moto's.

The same wrapper answers a worker's batch of result INSERTs or conditional UPDATEs,
which moto cannot run (``switchyard_local.moto_statements``), writes plain
PutItems and SendMessages the same direct way (``switchyard_local.moto_puts``,
``switchyard_local.moto_sends``), and answers a worker's ReceiveMessage,
DeleteMessageBatch and ChangeMessageVisibilityBatch (``switchyard_local.moto_receives``)
a stream reader's Query (``switchyard_local.moto_queries``), writes the result
cache's BatchWriteItems (``switchyard_local.moto_writes``) and applies plain
UpdateItems, the platform's counters (``switchyard_local.moto_updates``).
Each direct answer carries the header ``moto_wire.DIRECT_HEADER``.

Like ``moto_sqs`` and ``moto_dynamodb``, this reads moto's internals, so it refuses
any moto but the pinned one.
"""

from __future__ import annotations

import io
import json
import re
import uuid
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from switchyard_local import (
    moto_iam,
    moto_puts,
    moto_queries,
    moto_receives,
    moto_sends,
    moto_statements,
    moto_updates,
    moto_writes,
)
from switchyard_local.moto_sqs import require_pinned_moto
from switchyard_local.moto_wire import (
    DIRECT_HEADER,
    json_request,
    key_names,
    plain_attributes,
    plain_key,
    request_items,
    table_of,
)

TARGET = "DynamoDB_20120810.GetItem"
_FIELDS = {"TableName", "Key", "ConsistentRead"}
BATCH_TARGET = "DynamoDB_20120810.BatchGetItem"
_BATCH_FIELDS = {"Keys", "ProjectionExpression", "ExpressionAttributeNames", "ConsistentRead"}
_PLACEHOLDERS = re.compile(r"#\w+(?: ?, ?#\w+)*")
_MOST_KEYS = 100  # DynamoDB's limit per BatchGetItem

Application = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wrap(app: Application) -> Application:
    """``app`` (moto's WSGI application) with plain GetItems and BatchGetItems answered
    directly, plain PutItems (``moto_puts``) and SendMessages, alone or in batches
    (``moto_sends``), written so, batches of INSERTs and conditional UPDATEs
    (``moto_statements``), a worker's receives, deletes and visibility changes
    (``moto_receives``), a stream reader's Query (``moto_queries``), BatchWriteItems
    of puts (``moto_writes``) and plain UpdateItems (``moto_updates``)."""
    require_pinned_moto("switchyard_local.moto_reads reads {moto}'s DynamoDB tables")
    answers = {
        TARGET: get_item,
        BATCH_TARGET: batch_get_item,
        moto_statements.TARGET: moto_statements.batch_statements,
        moto_puts.TARGET: moto_puts.put_item,
        moto_sends.TARGET: moto_sends.send_message,
        moto_sends.BATCH_TARGET: moto_sends.send_message_batch,
        moto_receives.RECEIVE_TARGET: moto_receives.receive_message,
        moto_receives.DELETE_TARGET: moto_receives.delete_message_batch,
        moto_receives.VISIBILITY_TARGET: moto_receives.change_message_visibility_batch,
        moto_queries.TARGET: moto_queries.query,
        moto_writes.TARGET: moto_writes.batch_write_item,
        moto_updates.TARGET: moto_updates.update_item,
    }

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        target = environ.get("HTTP_X_AMZ_TARGET")
        if target not in answers or environ.get("REQUEST_METHOD") != "POST":
            # (before and after: a decision made while it is applied is not kept)
            moto_iam.forget_if_iam_may_change(environ)
            try:
                return app(environ, start_response)
            finally:
                moto_iam.forget_if_iam_may_change(environ)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        # Under IAM a call its caller may not make is moto's to refuse (moto_iam).
        answer = answers[target](environ, body) if moto_iam.permits(environ, body, target) else None
        if answer is None:  # not plain, or refused: moto answers, from the same bytes
            environ["wsgi.input"] = io.BytesIO(body)
            return app(environ, start_response)
        start_response(
            "200 OK",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("Content-Length", str(len(answer))),
                ("x-amzn-RequestId", str(uuid.uuid4())),
                ("x-amz-crc32", str(zlib.crc32(answer))),
                (DIRECT_HEADER, "1"),
            ],
        )
        return [answer]

    return application


def get_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain GetItem, or None for moto to answer."""
    request = json_request(body, _FIELDS)
    if request is None:
        return None
    name, key = request.get("TableName"), request.get("Key")
    if not isinstance(name, str) or not isinstance(key, dict) or not plain_key(key):
        return None
    if not isinstance(request.get("ConsistentRead", False), bool):
        return None
    found = table_of(environ, name)
    if found is None:
        return None
    backend, table = found
    if set(key) != set(key_names(table)):
        return None
    item = backend.get_item(name, key)
    if item is None:
        return b"{}"
    attributes = plain_attributes(item.attrs)
    return None if attributes is None else json.dumps({"Item": attributes}).encode()


def batch_get_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain BatchGetItem, or None for moto to answer. Plain: each
    table's keys plain and naming its key, none twice, at most 100 in all, whole items
    or a ``ProjectionExpression`` of ``#name`` placeholders that
    ``ExpressionAttributeNames`` names (each of them used), optionally
    ``ConsistentRead``; each item found holding plain attributes where projected."""
    found = request_items(environ, body)
    if found is None:
        return None
    backend, batches = found
    answer: dict[str, Any] = {"ConsumedCapacity": [], "Responses": {}, "UnprocessedKeys": {}}
    asked_in_all = 0
    for name, asked in batches.items():
        if not isinstance(asked, dict) or not set(asked) <= _BATCH_FIELDS:
            return None
        projected = "ProjectionExpression" in asked or "ExpressionAttributeNames" in asked
        keys, wanted = asked.get("Keys"), _projected(asked) if projected else None
        table = backend.tables.get(name)
        if projected and wanted is None:
            return None
        if table is None or not isinstance(keys, list) or not keys:
            return None
        asked_in_all += len(keys)
        if asked_in_all > _MOST_KEYS or not isinstance(asked.get("ConsistentRead", False), bool):
            return None
        names = set(key_names(table))
        if not all(isinstance(k, dict) and plain_key(k) and set(k) == names for k in keys):
            return None
        if len({json.dumps(k, sort_keys=True) for k in keys}) != len(keys):
            return None  # a key asked twice: moto's error
        found = []
        for key in keys:
            item = backend.get_item(name, key)
            if item is None:
                continue
            attrs = item.attrs
            if wanted is not None:
                attrs = {a: v for a, v in attrs.items() if a in wanted}
            attributes = plain_attributes(attrs)
            if attributes is None:
                return None
            found.append(attributes)
        answer["Responses"][name] = found
        answer["ConsumedCapacity"].append({"CapacityUnits": len(keys), "TableName": name})
    return json.dumps(answer).encode()


def _projected(asked: dict[str, Any]) -> set[str] | None:
    """The attribute names a ``ProjectionExpression`` of placeholders projects; None
    where it is missing or of another form, or a name is missing or unused."""
    projection, names = asked.get("ProjectionExpression"), asked.get("ExpressionAttributeNames")
    if not isinstance(projection, str) or not isinstance(names, dict):
        return None
    if not _PLACEHOLDERS.fullmatch(projection):
        return None
    used = {p.strip() for p in projection.split(",")}
    if used != set(names) or not all(isinstance(v, str) and v for v in names.values()):
        return None
    return {names[p] for p in used}
