"""Key schemas of the platform's DynamoDB tables, shared by the CDK app and the
local provisioner so both create the same tables."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableKeys:
    partition: str
    sort: str
    ttl_attribute: str | None = None


# One item per model version; versions are immutable (conditional writes).
REGISTRY = TableKeys(partition="model", sort="version")
# Results and async status, keyed by tenant first: no tenant can address another's.
RESULTS = TableKeys(partition="tenant", sort="request_id", ttl_attribute="expires_at")
# Batch inference jobs (one per dropped file).
JOBS = TableKeys(partition="tenant", sort="job_id", ttl_attribute="expires_at")
