"""Tenants are API keys: a key's value resolves to its tenant through API Gateway's
own key store. In the cloud API Gateway has already refused unknown keys; on the
local platform the router is the first to look, against the emulator's keys. One
lookup serves both, so the two substrates cannot disagree on who a caller is."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

TENANT_TAG = "switchyard:tenant"


class TenantDirectory(Protocol):
    def tenant_for(self, api_key: str) -> str | None: ...


class ApiGatewayKeyDirectory:
    """Maps enabled API key values to the tenant named in each key's tag."""

    def __init__(
        self, apigateway: Any, ttl_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = apigateway
        self._ttl = ttl_seconds
        self._clock = clock
        self._keys: dict[str, str] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def tenant_for(self, api_key: str) -> str | None:
        with self._lock:
            stale = self._clock() - self._loaded_at >= self._ttl
            if stale or (api_key not in self._keys and self._clock() - self._loaded_at >= 1.0):
                # Unknown keys trigger at most one reload a second: a new tenant
                # works at once, and a flood of bad keys cannot flood the API.
                self._keys = self._load()
                self._loaded_at = self._clock()
            return self._keys.get(api_key)

    def _load(self) -> dict[str, str]:
        keys: dict[str, str] = {}
        for page in self._api.get_paginator("get_api_keys").paginate(includeValues=True):
            for item in page.get("items", []):
                tenant = item.get("tags", {}).get(TENANT_TAG)
                if item.get("enabled") and tenant and item.get("value"):
                    keys[item["value"]] = tenant
        return keys
