"""Claim checks: payloads too large for a message or a table item live in S3,
and the message or item carries a pointer to them."""

from __future__ import annotations

import json
from typing import Any, Protocol

from switchyard.artifacts import split_s3_uri
from switchyard.jsontext import json_bytes
from switchyard.missing_objects import object_missing


class PayloadStore(Protocol):
    def put_json(self, key: str, value: Any) -> str:
        """Store ``value`` as JSON under ``key``; returns its s3:// URI."""
        ...

    def put_json_text(self, key: str, text: bytes) -> str:
        """Store ``text``, JSON already, under ``key``; returns its s3:// URI."""
        ...

    def get_json(self, uri: str, byte_range: str | None = None) -> Any:
        """The JSON stored at ``uri``; with ``byte_range`` (``first-last``, as
        :func:`json_array` gives them), the value in those bytes of it only."""
        ...


def json_array(texts: list[bytes]) -> tuple[bytes, list[str]]:
    """JSON texts as one JSON array, and the bytes each takes in it (``first-last``,
    inclusive, as an HTTP ``Range`` names them): several values in one object, each
    read back on its own."""
    ranges = []
    at = 1  # after the "["
    for text in texts:
        ranges.append(f"{at}-{at + len(text) - 1}")
        at += len(text) + 1  # and its ","
    return b"[" + b",".join(texts) + b"]", ranges


class PayloadMissing(Exception):
    """A claim-check pointer leads nowhere (expired or never written)."""


class S3PayloadStore:
    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def put_json(self, key: str, value: Any) -> str:
        return self.put_json_text(key, json_bytes(value))

    def put_json_text(self, key: str, text: bytes) -> str:
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=text, ContentType="application/json")
        return f"s3://{self._bucket}/{key}"

    def get_json(self, uri: str, byte_range: str | None = None) -> Any:
        bucket, key = split_s3_uri(uri)
        ranged = {"Range": f"bytes={byte_range}"} if byte_range else {}
        try:
            body = self._s3.get_object(Bucket=bucket, Key=key, **ranged)["Body"].read()
        except self._s3.exceptions.ClientError as exc:
            # Expired (the bucket's lifecycle) or never written: 404, or 403 to a
            # role without s3:ListBucket (switchyard.missing_objects).
            if object_missing(exc):
                raise PayloadMissing(f"{uri} does not exist") from None
            raise
        return json.loads(body)
