"""Claim checks: payloads too large for a message or a table item live in S3,
and the message or item carries a pointer to them."""

from __future__ import annotations

import json
from typing import Any, Protocol

from switchyard.artifacts import split_s3_uri
from switchyard.jsontext import json_bytes


class PayloadStore(Protocol):
    def put_json(self, key: str, value: Any) -> str:
        """Store ``value`` as JSON under ``key``; returns its s3:// URI."""
        ...

    def get_json(self, uri: str) -> Any: ...


class PayloadMissing(Exception):
    """A claim-check pointer leads nowhere (expired or never written)."""


class S3PayloadStore:
    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def put_json(self, key: str, value: Any) -> str:
        body = json_bytes(value)
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body, ContentType="application/json")
        return f"s3://{self._bucket}/{key}"

    def get_json(self, uri: str) -> Any:
        bucket, key = split_s3_uri(uri)
        try:
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            raise PayloadMissing(f"{uri} does not exist") from None
        return json.loads(body)
