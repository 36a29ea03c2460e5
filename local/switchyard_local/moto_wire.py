"""What every direct answer of the emulator reads from a request (``moto_reads``,
``moto_puts``, ``moto_sends``, ``moto_statements``, ``moto_receives``,
``moto_queries``): its JSON body, and moto's own backend and table for the caller's
account and region; and how an item read is answered."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

# A header on every direct answer (its value "1"), so that a client can tell which
# calls the emulator answered itself (``bench/emulator_calls.py`` counts them); boto3
# reads no header it does not know.
DIRECT_HEADER = "x-switchyard-direct"

T = TypeVar("T")


def json_request(body: bytes, fields: set[str]) -> dict[str, Any] | None:
    """A direct path's request: the body's JSON object, if each of its fields is one
    of ``fields``; None (moto's to answer) otherwise."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or not set(request) <= fields:
        return None
    return request


def request_items(environ: dict[str, Any], body: bytes) -> tuple[Any, dict[str, Any]] | None:
    """moto's DynamoDB backend and a batch request's ``RequestItems`` (a request of
    that field alone, naming at least one table); None otherwise (moto's to answer)."""
    request = json_request(body, {"RequestItems"})
    batches = request.get("RequestItems") if request is not None else None
    if not isinstance(batches, dict) or not batches:
        return None
    backend = backend_of(environ)
    return None if backend is None else (backend, batches)


def table_of(environ: dict[str, Any], name: str) -> tuple[Any, Any] | None:
    """moto's DynamoDB backend for the request and its table ``name``; None where
    either is not found (moto's to answer)."""
    backend = backend_of(environ)
    table = backend.tables.get(name) if backend is not None else None
    return None if table is None else (backend, table)


def key_names(table: Any) -> list[str]:
    """A moto table's key attributes: its hash key, then its range key if it has one."""
    return [table.hash_key_attr] + ([table.range_key_attr] if table.has_range_key else [])


def standard_queue(environ: dict[str, Any], url: Any) -> tuple[Any, str, Any] | None:
    """moto's SQS backend for the request, the queue's name as moto reads it from
    ``url`` (its last part, or the name itself) and the queue, for a standard queue
    that exists; None otherwise (moto's to answer)."""
    if not isinstance(url, str):
        return None
    backend = backend_of(environ, "sqs")
    if backend is None:
        return None
    name = url.split("/")[-1] if url.startswith(("http://", "https://")) else url
    queue = backend.queues.get(name)
    if queue is None or queue.fifo_queue:
        return None
    return backend, name, queue


def on_standard_queue(environ: dict[str, Any], url: Any, call: Callable[[Any, str], T]) -> T | None:
    """``call(backend, name)`` on the standard queue at ``url``; None where there is
    no such queue, or where moto's backend refuses the call (an ``SQSException``,
    raised before it changed anything): moto's application then answers it, with its
    own error."""
    found = standard_queue(environ, url)
    if found is None:
        return None
    backend, name, _ = found
    from moto.sqs.exceptions import SQSException

    try:
        return call(backend, name)
    except SQSException:
        return None


def backend_of(environ: dict[str, Any], service: str = "dynamodb") -> Any:
    """moto's backend of ``service`` (``dynamodb`` or ``sqs``) for the request's
    account and region, found as moto finds them for a SigV4-signed call to an
    address that names no region; None where moto would look elsewhere (an account
    set by environment or header)."""
    if "MOTO_ACCOUNT_ID" in os.environ or "HTTP_X_MOTO_ACCOUNT_ID" in environ:
        return None
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    if "AWS4" not in authorization or "amazonaws.com" in environ.get("HTTP_HOST", ""):
        return None
    from moto.core.responses import BaseResponse
    from moto.iam.models import get_account_id_from

    if service == "sqs":
        from moto.sqs.models import sqs_backends as backends
    else:
        from moto.dynamodb.models import dynamodb_backends as backends

    if BaseResponse.region_from_useragent_regex.search(environ.get("HTTP_USER_AGENT", "")):
        return None
    try:
        region = authorization.split(",")[0].split("/")[2]
    except IndexError:
        return None
    match = BaseResponse.access_key_regex.search(authorization)
    account = get_account_id_from(match.group(1) if match else "AKIAEXAMPLE")
    try:
        return backends[account][region]
    except KeyError:
        return None


_PLAIN_TYPES = {"S", "N", "BOOL", "NULL", "SS", "NS"}
_KEY_TYPES = {"S", "N"}
_VALUE_TYPES = frozenset({"S", "N", "BOOL", "NULL"})


def plain_values(attributes: dict[str, Any], types: frozenset[str] = _VALUE_TYPES) -> bool:
    """Each of a request's attribute values one value of a plain type: by default a
    string, a number (as DynamoDB sends it, a string), a boolean or a null (and a
    binary, as base64 text, where ``types`` holds ``B``)."""
    for value in attributes.values():
        if not isinstance(value, dict) or len(value) != 1:
            return False
        ((kind, data),) = value.items()
        if kind not in types:
            return False
        if not isinstance(data, bool if kind in ("BOOL", "NULL") else str):
            return False
    return True


def plain_key(key: dict[str, Any]) -> bool:
    """Each key attribute one non-empty string or number value."""
    for value in key.values():
        if not isinstance(value, dict) or len(value) != 1:
            return False
        ((kind, text),) = value.items()
        if kind not in _KEY_TYPES or not isinstance(text, str) or not text:
            return False
    return True


def plain_attributes(attrs: dict[str, Any]) -> dict[str, Any] | None:
    """moto's attributes (an item's ``attrs``) as DynamoDB's JSON, if each is of a
    plain type; else None (moto's serializer's to form)."""
    attributes = {}
    for attribute, value in attrs.items():
        if value.type in _PLAIN_TYPES:
            attributes[attribute] = {value.type: value.value}
        elif value.type == "B" and isinstance(value.value, str | bytes):
            # As moto keeps it: the base64 text it was given, or bytes to encode.
            text = value.value
            attributes[attribute] = {"B": text if isinstance(text, str) else _b64(text)}
        else:
            return None
    return attributes


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()
