"""Idempotency keys: a caller's retry of a POST that creates work runs nothing twice.

A caller that sends ``Idempotency-Key: <key>`` with a POST that creates work
(predict, generate, the OpenAI API's completions and embeddings, jobs) and sends it
again, after a timeout on its side, gets the first request's answer, not a second
request:

1. A key belongs to its tenant: another tenant's same key is another key.
2. The first request with a key claims it, after its input is checked and before
   its work is enqueued: one conditional write of an item ``idem#<key>`` in the
   tenant's partition of the results table, holding the request's id (or job's),
   the fingerprint of its body, and what a replay needs to answer as it would. Of
   two requests with one key at once, one claim wins; the other is a replay.
3. A replay with the same fingerprint answers with the first request's id and its
   result as it stands now; nothing is enqueued, run or charged again.
4. A replay with another fingerprint is refused (422, ``idempotency_key_reused``,
   naming the header): the key names another request.
5. A key lasts as long as its request's result (the results table's TTL). A
   request that is refused before its work is enqueued (a full queue, a failed
   send) gives its key back, so the caller's retry is a first request again.

The answer lives in the request's record, which the worker writes: the key's item
only points at it. So Powertools' idempotency utility (which stores a function's
return value, and answers a call still in progress with an error) is not used: a
replay of a request still running waits for its result or is answered 202, as the
first request would be answered now.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Protocol

from switchyard.fields import FieldError
from switchyard.tables import RESULTS

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
# Visible ASCII, no spaces: a UUID, a ULID, a hash, or any token a client makes.
KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_KEY_RE = re.compile(KEY_PATTERN)
_ITEM_PREFIX = "idem#"
_TTL = RESULTS.ttl_attribute or "expires_at"
# The id of the request (or job) a key's item points at: not ``request_id``, the
# table's sort key, which names the item itself.
_HOLDER = "answered_by"


class KeyReused(Exception):
    """The key was used, within its TTL, with another body: a replay with other
    content cannot be answered with the first request's answer."""

    status = 422
    code = "idempotency_key_reused"

    def __init__(self, key: str) -> None:
        super().__init__(
            f"{HEADER} {key!r} was used with a different request body; "
            "send a new key for a new request"
        )
        self.key = key
        self.errors = [FieldError(HEADER, "already used with a different request body")]


def check_key(key: str) -> FieldError | None:
    """The header's fault, or None for a usable key."""
    if _KEY_RE.match(key):
        return None
    return FieldError(
        HEADER, f"must be 1 to {MAX_KEY_LENGTH} visible ASCII characters with no spaces"
    )


def fingerprint(scope: str, body: Any) -> str:
    """The hash of a request's content: ``scope`` (the method and path it was sent
    to) and its body as canonical JSON (sorted keys, no spaces), so the same body
    written with its keys in another order is the same request."""
    text = json.dumps([scope, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class KeyUse:
    """A key as one request claims it, or as a replay finds it."""

    tenant: str
    key: str
    fingerprint: str
    request_id: str  # the request's id, or the job's
    expires_at: int  # epoch seconds: the request's result's TTL
    # What a replay answers from (the request's queued record as JSON, or the job's
    # first answer); opaque here.
    answer: str = ""

    def matches(self, fingerprint: str) -> bool:
        return self.fingerprint == fingerprint


class KeyStore(Protocol):
    """Where keys are claimed, shared by every router process and Lambda instance."""

    def claim(self, use: KeyUse, now: float) -> KeyUse | None:
        """Record ``use`` unless its tenant's key holds an unexpired use at ``now``;
        None when recorded, else the use it holds (the first request's)."""
        ...

    def get(self, tenant: str, key: str, now: float) -> KeyUse | None:
        """The unexpired use of the tenant's key, if any."""
        ...

    def release(self, use: KeyUse) -> None:
        """Give the key back (its request was not enqueued), if ``use`` holds it."""
        ...


class IdempotencyKeys:
    """The rule over a :class:`KeyStore` (no AWS here)."""

    def __init__(self, store: KeyStore) -> None:
        self._store = store

    def earlier(self, tenant: str, key: str, fingerprint: str, now: float) -> KeyUse | None:
        """The first request's use of the key, for a replay; :class:`KeyReused` if
        it was another body's."""
        return _same(self._store.get(tenant, key, now), fingerprint, key)

    def claim(self, use: KeyUse, now: float) -> KeyUse | None:
        """None: ``use`` holds the key now, its request goes on. Else the use that
        won it first (a replay); :class:`KeyReused` if that was another body's."""
        return _same(self._store.claim(use, now), use.fingerprint, use.key)

    def release(self, use: KeyUse | None) -> None:
        if use is not None:
            self._store.release(use)


def _same(use: KeyUse | None, fingerprint: str, key: str) -> KeyUse | None:
    if use is not None and not use.matches(fingerprint):
        raise KeyReused(key)
    return use


class InMemoryKeyStore:
    """:class:`KeyStore` in one process: for unit tests."""

    def __init__(self) -> None:
        self.uses: dict[tuple[str, str], KeyUse] = {}

    def claim(self, use: KeyUse, now: float) -> KeyUse | None:
        held = self.get(use.tenant, use.key, now)
        if held is not None:
            return held
        self.uses[(use.tenant, use.key)] = use
        return None

    def get(self, tenant: str, key: str, now: float) -> KeyUse | None:
        use = self.uses.get((tenant, key))
        return use if use is not None and use.expires_at > now else None

    def release(self, use: KeyUse) -> None:
        held = self.uses.get((use.tenant, use.key))
        if held is not None and held.request_id == use.request_id:
            self.uses[(use.tenant, use.key)] = replace(held, expires_at=0)


class DynamoDBKeyStore:
    """:class:`KeyStore` on the results table: an item ``idem#<key>`` in the
    tenant's partition (it holds no ``doc``, so it is no request), removed by the
    table's TTL with the request's result. A claim is one conditional put (no item,
    or one whose TTL has passed but which DynamoDB has not removed yet); a release
    sets the item's TTL to 0, on condition that it still names the request, so that
    the next claim may take it (an update: the routers' roles write single items
    with Get, Put and Update only)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def _key(self, tenant: str, key: str) -> dict[str, Any]:
        return {RESULTS.partition: {"S": tenant}, RESULTS.sort: {"S": _ITEM_PREFIX + key}}

    def claim(self, use: KeyUse, now: float) -> KeyUse | None:
        item = {
            **self._key(use.tenant, use.key),
            _HOLDER: {"S": use.request_id},
            "fingerprint": {"S": use.fingerprint},
            "answer": {"S": use.answer},
            _TTL: {"N": str(use.expires_at)},
        }
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(#sk) OR #ttl <= :now",
                ExpressionAttributeNames={"#sk": RESULTS.sort, "#ttl": _TTL},
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._ddb.exceptions.ConditionalCheckFailedException as exc:
            held = exc.response.get("Item")
            return (
                self._use(use.tenant, use.key, held) if held else self.get(use.tenant, use.key, now)
            )
        return None

    def get(self, tenant: str, key: str, now: float) -> KeyUse | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=self._key(tenant, key), ConsistentRead=True
        ).get("Item")
        use = self._use(tenant, key, item) if item else None
        return use if use is not None and use.expires_at > now else None

    def release(self, use: KeyUse) -> None:
        # Taken by a later request since: not this one's to give back.
        with contextlib.suppress(self._ddb.exceptions.ConditionalCheckFailedException):
            self._ddb.update_item(
                TableName=self._table,
                Key=self._key(use.tenant, use.key),
                UpdateExpression="SET #ttl = :gone",
                ConditionExpression="#holder = :id",
                ExpressionAttributeNames={"#ttl": _TTL, "#holder": _HOLDER},
                ExpressionAttributeValues={":gone": {"N": "0"}, ":id": {"S": use.request_id}},
            )

    @staticmethod
    def _use(tenant: str, key: str, item: dict[str, Any]) -> KeyUse | None:
        if "fingerprint" not in item:
            return None
        return KeyUse(
            tenant=tenant,
            key=key,
            fingerprint=item["fingerprint"]["S"],
            request_id=item[_HOLDER]["S"],
            expires_at=int(item[_TTL]["N"]),
            answer=item.get("answer", {}).get("S", ""),
        )
