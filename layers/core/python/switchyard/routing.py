"""Traffic routing: which version answers a request.

A routing document per model holds weights per version, the sticky key, an optional
shadow and a fallback. Assignment hashes the sticky key into fixed buckets, and the
versions own consecutive bucket ranges in a fixed order (the document's order), so
that the same key keeps its version while weights are unchanged, and growing the
last version's share from 10 % to 20 % only moves keys into it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from switchyard.settings import RoutingSettings

BUCKETS = 10_000
SCHEMA_FILE = Path(__file__).with_name("routing_schema.json")


class ShadowRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    percent: int = Field(ge=0, le=100)


class RoutingDocument(BaseModel):
    """A model's routing document, as stored in AppConfig."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(default=1, ge=1, le=1)
    weights: dict[str, int] = Field(min_length=1)
    sticky_key: str = "x-user-id"
    shadow: ShadowRule | None = None
    fallback: str | None = None

    @model_validator(mode="after")
    def _check(self) -> RoutingDocument:
        for version, weight in self.weights.items():
            if not 0 <= weight <= 100:
                raise ValueError(f"weights.{version}: {weight} is not between 0 and 100")
        total = sum(self.weights.values())
        if total != 100:
            raise ValueError(f"weights: they sum to {total}, not 100")
        return self


def pick_version(document: RoutingDocument, sticky_value: str) -> str:
    """The version that owns ``sticky_value``'s bucket."""
    bucket = bucket_of(sticky_value)
    upper = 0
    chosen = ""
    for version, weight in document.weights.items():
        upper += weight * BUCKETS // 100
        if weight:
            chosen = version
        if bucket < upper:
            return version
    return chosen


def shadow_version(document: RoutingDocument, request_id: str, primary: str) -> str | None:
    """The shadow version if this request is in the shadow share, else None."""
    rule = document.shadow
    if rule is None or rule.version == primary or rule.percent == 0:
        return None
    return (
        rule.version if bucket_of("shadow:" + request_id) < rule.percent * BUCKETS // 100 else None
    )


def stable_version(document: RoutingDocument) -> str:
    """The version holding the largest share (the first of equals): what a canary
    is compared with and what a rollback returns its traffic to."""
    return max(document.weights, key=lambda v: document.weights[v])


def canaries(document: RoutingDocument) -> list[str]:
    stable = stable_version(document)
    return [v for v, w in document.weights.items() if w > 0 and v != stable]


def role_of(document: RoutingDocument | None, version: str) -> str:
    """ "canary" for a version a rollback would take traffic from, else "stable".
    The router tags its metrics with it, so that the cloud's canary alarms can
    compare the two without knowing which versions a document names."""
    return "canary" if document is not None and version in canaries(document) else "stable"


def rolled_back(document: RoutingDocument, versions: list[str]) -> RoutingDocument:
    """The document with the traffic of ``versions`` given to the stable version; the
    rolled-back versions stay listed at 0 so that their bucket order is kept."""
    stable = stable_version(document)
    weights = dict(document.weights)
    for version in versions:
        if version != stable:
            weights[stable] += weights[version]
            weights[version] = 0
    shadow = (
        document.shadow if document.shadow and document.shadow.version not in versions else None
    )
    return document.model_copy(update={"weights": weights, "shadow": shadow})


def bucket_of(value: str) -> int:
    digest = hashlib.sha256(value.encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


class RoutingSource(Protocol):
    def document(self, model: str) -> RoutingDocument | None: ...


class CachedRouting:
    """Caches each model's document for a few seconds; keeps the last good one when
    a fetch fails or returns something invalid, so a bad document never stops traffic."""

    def __init__(
        self,
        fetch: Callable[[str], bytes | None],
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl_seconds
        self._clock = clock
        self._cache: dict[str, tuple[float, RoutingDocument | None]] = {}
        self._lock = threading.Lock()

    def document(self, model: str) -> RoutingDocument | None:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(model)
        if cached and now - cached[0] < self._ttl:
            return cached[1]
        previous = cached[1] if cached else None
        try:
            raw = self._fetch(model)
            doc = RoutingDocument.model_validate_json(raw) if raw else previous
        except Exception:  # noqa: BLE001 - a bad fetch keeps the last good document
            doc = previous
        with self._lock:
            self._cache[model] = (now, doc)
        return doc


def appconfig_extension_fetcher(
    application: str, environment: str, base_url: str = "http://localhost:2772"
) -> Callable[[str], bytes]:
    """Reads documents through the AppConfig Lambda extension's local HTTP API
    (``localhost:2772`` in Lambda; the local platform runs a stand-in elsewhere).
    With no ``environment``, each model's document is in the environment named
    after the model (the cloud's layout, read by a router that serves every model)."""

    def fetch(model: str) -> bytes:
        url = (
            f"{base_url}/applications/{application}"
            f"/environments/{environment or model}/configurations/{model}"
        )
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
            return response.read()

    return fetch


def routing_for(settings: RoutingSettings) -> RoutingSource | None:
    """The routing documents a process's settings point it to (None: it has none,
    and each model's newest active version serves)."""
    if settings.routing_source != "appconfig-extension":
        return None
    fetch = appconfig_extension_fetcher(
        settings.appconfig_application,
        settings.appconfig_environment,
        settings.appconfig_extension_url,
    )
    return CachedRouting(fetch, settings.routing_cache_seconds)


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())
