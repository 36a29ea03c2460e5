"""The result cache: a model's answer to inputs it has answered before.

A deterministic model gives the same outputs for the same inputs, so a repeated
request need not be queued, batched and run again: the router answers it from the
cache with one read. Entries are kept per tenant (no tenant learns what another
asked), model, version and a hash of the inputs, for the model's
``result_cache_seconds`` (0, the default, turns the cache off: what a model that is
not deterministic declares). Requests that are not repeatable are never cached: a
sampled generation without a seed (``GenerationRequest.repeatable``); nor are
streamed generations, nor a batch job's chunks (a job's lines are answered by its
workers, and its output is assembled from their results).

The cache is for inputs that repeat, and only those pay for it. A router admits
inputs to the cache on their second sight (``Sightings``, in its own memory): the
first time it is asked, it neither reads the cache nor has an entry written, so a
request whose inputs are new costs what it would cost with no cache at all (its
enqueue, its result write, the router's look for the result). The second time, it
reads the cache (a miss) and asks the worker to fill the entry; from the third, it
is answered from the cache. A router instance that starts afresh (a new Lambda
execution environment, a restarted local router) has seen nothing yet.

The worker that computed a cacheable request's outputs fills the entry, with one
write per batch of results (the router names the entry in the message:
``QueueMessage.cache_key``). Entries live in the results table, in the tenant's
partition under ``cache#<model>#<version>#<hash>``, and expire with its TTL.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from switchyard.results import inline_outputs, outputs_attribute
from switchyard.tables import RESULTS

_PREFIX = "cache#"
_BATCH_WRITE_LIMIT = 25  # items per BatchWriteItem
_MAX_ENTRY_BYTES = 350_000  # under DynamoDB's 400 KB item limit, with the key beside it
_WRITE_TRIES = 3


def cache_key(inputs: list[Any]) -> str:
    """The inputs' hash: sha256 of their canonical JSON (sorted keys, no spaces), so
    the same inputs sent with keys in another order are the same entry."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def cacheable(result_cache_seconds: int, inputs: list[Any], generative: bool) -> bool:
    """Whether a request's answer may come from (and go to) the cache."""
    if result_cache_seconds <= 0:
        return False
    if generative:
        from switchyard.generation import as_request  # not on a non-generative path

        requests = [as_request(item) for item in inputs]
        # A streamed answer is its stream of tokens, which the cache does not hold.
        return all(r.repeatable and not r.stream for r in requests)
    return True


class Sightings:
    """The inputs this process has been asked for, by tenant, model, version and
    inputs hash: the least recently seen are forgotten first, past ``capacity``
    (each costs about 100 bytes)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def seen_before(self, tenant: str, model: str, version: str, key: str) -> bool:
        """Records this sighting; whether there was one before it."""
        digest = hashlib.blake2b(
            "\x1f".join((tenant, model, version, key)).encode(), digest_size=16
        ).digest()
        with self._lock:
            if digest in self._seen:
                self._seen.move_to_end(digest)
                return True
            self._seen[digest] = None
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return False


@dataclass(frozen=True)
class CacheEntry:
    tenant: str
    model: str
    version: str
    key: str
    outputs: list[Any]
    expires_at: int  # epoch seconds


class ResultCache(Protocol):
    """Cached outputs by (tenant, model, version, inputs hash)."""

    def get(self, tenant: str, model: str, version: str, key: str) -> list[Any] | None:
        """The outputs cached for these inputs, or None (absent or expired)."""
        ...

    def put(self, entries: list[CacheEntry]) -> int:
        """Store entries (any number, in as few writes as the store allows); returns
        how many were stored. Entries too large to keep are skipped."""
        ...


class DynamoDBResultCache:
    """The cache in the results table (see the module docstring)."""

    def __init__(self, dynamodb: Any, table: str, clock: Any = time.time) -> None:
        self._ddb = dynamodb
        self._table = table
        self._clock = clock

    @staticmethod
    def _sort_key(model: str, version: str, key: str) -> str:
        return f"{_PREFIX}{model}#{version}#{key}"

    def get(self, tenant: str, model: str, version: str, key: str) -> list[Any] | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={
                RESULTS.partition: {"S": tenant},
                RESULTS.sort: {"S": self._sort_key(model, version, key)},
            },
        ).get("Item")
        # DynamoDB deletes expired items lazily (within days): the TTL is checked here.
        if item is None or int(item["expires_at"]["N"]) <= self._clock():
            return None
        return inline_outputs(item)

    def put(self, entries: list[CacheEntry]) -> int:
        requests = []
        unique = {(e.tenant, self._sort_key(e.model, e.version, e.key)): e for e in entries}
        for e in unique.values():  # one batch may answer the same inputs twice
            # Stored as results are (embeddings packed): DynamoDB bills by the KB.
            inline = outputs_attribute(e.outputs, _MAX_ENTRY_BYTES)
            if inline is None:
                continue
            name, value = inline
            requests.append(
                {
                    "PutRequest": {
                        "Item": {
                            RESULTS.partition: {"S": e.tenant},
                            RESULTS.sort: {"S": self._sort_key(e.model, e.version, e.key)},
                            name: value,
                            "expires_at": {"N": str(e.expires_at)},
                        }
                    }
                }
            )
        stored = 0
        for i in range(0, len(requests), _BATCH_WRITE_LIMIT):
            pending = requests[i : i + _BATCH_WRITE_LIMIT]
            for attempt in range(_WRITE_TRIES):
                response = self._ddb.batch_write_item(RequestItems={self._table: pending})
                left = response.get("UnprocessedItems", {}).get(self._table, [])
                stored += len(pending) - len(left)
                pending = left
                if not pending:
                    break
                time.sleep(0.05 * 2**attempt)
        return stored
