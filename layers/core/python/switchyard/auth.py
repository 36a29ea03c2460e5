"""Tenants are API keys, and the router never sees a key's value.

API Gateway checks the caller's ``x-api-key`` against its usage plans and passes the
verified key's *id* in the request context (``requestContext.identity.apiKeyId``).
The router maps that id to a tenant from its settings (``RouterSettings.tenant_keys``,
written by the CDK app from the API keys it creates, and by the local platform from
the keys it provisions on the emulator). So no deployed role can read a key's value,
and a cold start makes no call to learn who the tenants are. The local platform's
stand-in for API Gateway (``switchyard_local.gateway``) fills the request context
the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# Tag on each API key naming its tenant, for people reading the console.
TENANT_TAG = "switchyard:tenant"


class TenantDirectory(Protocol):
    """Who a verified API key belongs to."""

    def tenant_for(self, api_key_id: str) -> str | None: ...


class KeyIdDirectory:
    """API key id -> tenant, from the settings' tenant -> key id."""

    def __init__(self, tenant_keys: Mapping[str, str]) -> None:
        self._tenants = {key_id: tenant for tenant, key_id in tenant_keys.items()}

    def tenant_for(self, api_key_id: str) -> str | None:
        return self._tenants.get(api_key_id)


def verified_key_id(event: Mapping[str, Any] | None) -> str | None:
    """The API key id API Gateway verified, from a REST API proxy event."""
    identity = ((event or {}).get("requestContext") or {}).get("identity") or {}
    key_id = identity.get("apiKeyId")
    return key_id if isinstance(key_id, str) and key_id else None
