"""One place that makes boto3 clients, so the emulator is only a setting."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 4},
    connect_timeout=3,
    read_timeout=25,
    max_pool_connections=50,
)


@lru_cache(maxsize=32)
def client(service: str, region: str, endpoint_url: str | None = None) -> Any:
    """A cached, thread-safe client; ``endpoint_url`` points at the emulator locally."""
    return boto3.session.Session().client(
        service, region_name=region, endpoint_url=endpoint_url, config=_CONFIG
    )
