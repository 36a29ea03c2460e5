"""The events AWS sends the platform's functions, built from the JSON fixtures in
``events/``: the deploy tier invokes handlers with them, and the benchmarks' cold
start measures the router on them. The splitter gets S3's notifications wrapped in
an SQS event (S3 -> the batch-drop queue -> its event source mapping)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).with_name("events")


def event(name: str) -> dict[str, Any]:
    """A fresh copy of one fixture (``events/<name>.json``), to fill in."""
    return copy.deepcopy(json.loads((EVENTS / f"{name}.json").read_text()))


def rest_event(
    method: str,
    path: str,
    *,
    api_key: str,
    api_key_id: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    stage: str = "dev",
) -> dict[str, Any]:
    """An API Gateway REST API proxy event for ``method path`` with a verified key."""
    e = event("rest_api_proxy")
    e["httpMethod"] = e["requestContext"]["httpMethod"] = method
    e["path"] = path
    e["requestContext"]["path"] = f"/{stage}{path}"
    e["requestContext"]["stage"] = stage
    e["body"] = None if body is None else json.dumps(body)
    e["queryStringParameters"] = query
    e["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    for headers in (e["headers"], e["multiValueHeaders"]):
        headers["x-api-key"] = api_key if headers is e["headers"] else [api_key]
    identity = e["requestContext"]["identity"]
    identity["apiKey"], identity["apiKeyId"] = api_key, api_key_id
    return e


def sqs_event(*bodies: str) -> dict[str, Any]:
    """An SQS event source mapping's event: one record per message body."""
    template = event("sqs_message")["Records"][0]
    records = []
    for i, body in enumerate(bodies):
        record = copy.deepcopy(template)
        record["messageId"] = f"message-{i}"
        record["receiptHandle"] = f"handle-{i}"
        record["body"] = body
        records.append(record)
    return {"Records": records}


def s3_event(bucket: str, key: str) -> dict[str, Any]:
    """S3's ObjectCreated event for ``key`` (URL-encoded, as S3 sends it)."""
    from urllib.parse import quote_plus

    e = event("s3_object_created")
    record = e["Records"][0]["s3"]
    record["bucket"]["name"] = bucket
    record["bucket"]["arn"] = f"arn:aws:s3:::{bucket}"
    record["object"]["key"] = quote_plus(key)
    return e
