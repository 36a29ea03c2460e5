"""The model registry: one immutable item per model version.

A version names its artifact (an S3 URI and the artifact's sha256), its runtime,
its input signature and its batching settings. Versions are written once, with a
condition, so a record can never be overwritten; only ``status`` may change.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from switchyard.schemas import Signature
from switchyard.tables import REGISTRY

VersionStatus = Literal["active", "retired"]


class ModelVersion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
    status: VersionStatus = "active"
    runtime: str
    artifact_uri: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: Signature
    labels: tuple[str, ...] = ()
    max_inputs_per_request: int
    max_batch_size: int
    max_wait_ms: int
    default_deadline_ms: int
    fallback: str | None = None
    # How long a repeated request may be answered from the result cache (0: never,
    # what a model that is not deterministic declares); see switchyard.result_cache.
    result_cache_seconds: int = Field(default=0, ge=0)
    # Generation models: the tokenizer (tokenizer.json beside the artifact) the
    # router counts prompt tokens with, and its sha256.
    tokenizer_uri: str | None = None
    tokenizer_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # Switchable faults for drills and tests (e.g. {"fail_every_call": true}).
    faults: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)


class VersionExists(Exception):
    """A version record exists already; versions are immutable."""


class Registry(Protocol):
    def get(self, model: str, version: str) -> ModelVersion | None: ...

    def versions(self, model: str | None = None) -> list[ModelVersion]: ...

    def register(self, record: ModelVersion) -> None:
        """Write a new version; raises VersionExists if it is there already."""
        ...


class DynamoDBRegistry:
    """Registry on a DynamoDB table keyed by (model, version)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def get(self, model: str, version: str) -> ModelVersion | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={REGISTRY.partition: {"S": model}, REGISTRY.sort: {"S": version}},
            ConsistentRead=True,
        ).get("Item")
        return _from_item(item) if item else None

    def versions(self, model: str | None = None) -> list[ModelVersion]:
        if model is not None:
            pages = self._ddb.get_paginator("query").paginate(
                TableName=self._table,
                KeyConditionExpression="#m = :m",
                ExpressionAttributeNames={"#m": REGISTRY.partition},
                ExpressionAttributeValues={":m": {"S": model}},
            )
        else:
            pages = self._ddb.get_paginator("scan").paginate(TableName=self._table)
        records = [_from_item(item) for page in pages for item in page.get("Items", [])]
        return sorted(records, key=lambda r: (r.model, r.created_at, r.version))

    def register(self, record: ModelVersion) -> None:
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=_to_item(record),
                ConditionExpression="attribute_not_exists(#m)",
                ExpressionAttributeNames={"#m": REGISTRY.partition},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            raise VersionExists(
                f"{record.model} {record.version} is registered already; versions are immutable"
            ) from None


def _to_item(record: ModelVersion) -> dict[str, Any]:
    # The record is kept whole as JSON in ``doc``; key and status stay plain
    # attributes so that queries and the console can use them.
    return {
        REGISTRY.partition: {"S": record.model},
        REGISTRY.sort: {"S": record.version},
        "status": {"S": record.status},
        "doc": {"S": record.model_dump_json()},
    }


def _from_item(item: dict[str, Any]) -> ModelVersion:
    doc = json.loads(item["doc"]["S"])
    doc["status"] = item.get("status", {}).get("S", doc.get("status", "active"))
    return ModelVersion.model_validate(doc)
