"""A tenant's caps on work it holds at once: streams, and sync requests in flight.

A streamed generation holds a router instance for minutes and a sync request holds
one until its answer or deadline, so a tenant that opens many at once would take
the routers' whole reserved concurrency from every other tenant. Each tenant may
hold at most its tier's number of each kind (``Tier.max_streams``,
``Tier.max_sync_requests``); one more is refused (429 with Retry-After) before
anything is enqueued.

The count is shared by every router process and Lambda instance: it lives in a
:class:`SlotStore` (DynamoDB in both substrates, :class:`DynamoDBSlotStore`). Each
slot is a lease that ends by itself: a router that crashes while it holds one
leaks it only until its expiry, when the next request of that tenant and kind
reclaims it.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from switchyard.tables import RESULTS

Kind = Literal["streams", "sync_requests"]
log = logging.getLogger("switchyard.admission")

# The results table item that counts one tenant's slots of one kind; it holds no
# ``doc``, so it is no request (``ResultStore.get`` answers None for it).
_ITEM_PREFIX = "admission#"
_SLOT_PREFIX = "slot_"
_HELD = "held"
_TTL = RESULTS.ttl_attribute or "expires_at"
# The counting item outlives its longest lease by this much, then DynamoDB's TTL
# removes an idle tenant's item.
_ITEM_LINGER_SECONDS = 3_600
# Attempts at taking a slot when another router changes the count meanwhile.
_ATTEMPTS = 4


@dataclass(frozen=True)
class Slot:
    """One unit of a tenant's cap, held until given back or until ``expires_at``."""

    tenant: str
    kind: Kind
    slot_id: str
    expires_at: float


class AtCapacity(Exception):
    """The tenant holds its cap of ``kind``: the caller should retry later."""

    def __init__(self, tenant: str, kind: Kind, limit: int, retry_after_seconds: int) -> None:
        noun = "streams" if kind == "streams" else "sync requests"
        super().__init__(
            f"tenant {tenant} holds {limit} {noun} at once, its tier's limit; "
            f"retry after {retry_after_seconds} s"
        )
        self.tenant = tenant
        self.kind = kind
        self.limit = limit
        self.retry_after_seconds = retry_after_seconds


class SlotStore(Protocol):
    """Where slots are counted, shared by every router."""

    def take(self, slot: Slot, limit: int, now: float) -> bool:
        """Hold ``slot`` if its tenant holds fewer than ``limit`` of its kind that
        are unexpired at ``now`` (expired ones are reclaimed); False at the cap."""
        ...

    def give_back(self, slot: Slot) -> None:
        """Free ``slot``; a slot already freed or reclaimed changes nothing."""
        ...


class Admission:
    """Takes and gives back tenants' slots (the domain rule; no AWS here).

    ``limits``: tenant -> kind -> its cap; a tenant or kind not named is not capped.
    ``lease_seconds``: kind -> how long a slot is held at most (the longest such a
    request can run), after which a crashed holder's slot is reclaimed.
    """

    def __init__(
        self,
        store: SlotStore,
        limits: Mapping[str, Mapping[Kind, int]],
        lease_seconds: Mapping[Kind, float],
        retry_after_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits = limits
        self._lease = lease_seconds
        self._retry_after = retry_after_seconds
        self._clock = clock

    def take(self, tenant: str, kind: Kind) -> Slot | None:
        """A slot of ``kind`` for ``tenant`` (None: not capped); :class:`AtCapacity`
        when it holds its cap."""
        limit = self._limits.get(tenant, {}).get(kind)
        if limit is None:
            return None
        now = self._clock()
        slot = Slot(tenant, kind, uuid.uuid4().hex, now + self._lease[kind])
        if not self._store.take(slot, limit, now):
            raise AtCapacity(tenant, kind, limit, self._retry_after)
        return slot

    def give_back(self, slot: Slot | None) -> None:
        """Free ``slot``. A failure to is logged, not raised: the request it was
        held for has its answer, and the slot's lease ends by itself."""
        if slot is None:
            return
        try:
            self._store.give_back(slot)
        except Exception:  # noqa: BLE001 - the lease expires in any case
            log.exception("giving back a slot failed", extra={"tenant": slot.tenant})

    @contextmanager
    def holding(self, tenant: str, kind: Kind) -> Iterator[Slot | None]:
        """A slot for the length of a ``with`` block, given back however it ends."""
        slot = self.take(tenant, kind)
        try:
            yield slot
        finally:
            self.give_back(slot)


class InMemorySlotStore:
    """:class:`SlotStore` in one process: for unit tests and a router alone."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, Kind], dict[str, float]] = {}

    def take(self, slot: Slot, limit: int, now: float) -> bool:
        slots = self.held.setdefault((slot.tenant, slot.kind), {})
        for slot_id in [s for s, expiry in slots.items() if expiry <= now]:
            del slots[slot_id]
        if len(slots) >= limit:
            return False
        slots[slot.slot_id] = slot.expires_at
        return True

    def give_back(self, slot: Slot) -> None:
        self.held.get((slot.tenant, slot.kind), {}).pop(slot.slot_id, None)


class DynamoDBSlotStore:
    """:class:`SlotStore` on the results table: one item per tenant and kind (key
    ``admission#<kind>`` in the tenant's partition), a ``held`` count and one
    attribute per slot holding its expiry.

    Taking a slot is one conditional update (``held`` under the cap, plus the slot,
    plus one to ``held``). At the cap DynamoDB returns the item as it was; if some
    of its slots have expired the update is tried again, removing them in the same
    write on condition that they are still there, so two routers never reclaim one
    slot twice. Giving back removes the slot and counts one fewer, on condition
    that the slot is still there.
    """

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def _key(self, slot: Slot) -> dict[str, Any]:
        return {
            RESULTS.partition: {"S": slot.tenant},
            RESULTS.sort: {"S": _ITEM_PREFIX + slot.kind},
        }

    def take(self, slot: Slot, limit: int, now: float) -> bool:
        expired: list[str] = []
        for _ in range(_ATTEMPTS):
            names = {"#held": _HELD, "#slot": _SLOT_PREFIX + slot.slot_id, "#ttl": _TTL}
            values = {
                ":expiry": {"N": f"{slot.expires_at:.3f}"},
                ":under": {"N": str(limit + len(expired))},
                ":change": {"N": str(1 - len(expired))},
                ":ttl": {"N": str(int(slot.expires_at) + _ITEM_LINGER_SECONDS)},
            }
            condition = ["(attribute_not_exists(#held) OR #held < :under)"]
            for i, name in enumerate(expired):
                names[f"#gone{i}"] = name
                condition.append(f"attribute_exists(#gone{i})")
            update = "SET #slot = :expiry, #ttl = :ttl ADD #held :change"
            if expired:
                update += " REMOVE " + ", ".join(f"#gone{i}" for i in range(len(expired)))
            try:
                self._ddb.update_item(
                    TableName=self._table,
                    Key=self._key(slot),
                    UpdateExpression=update,
                    ConditionExpression=" AND ".join(condition),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return True
            except self._ddb.exceptions.ConditionalCheckFailedException as exc:
                item = exc.response.get("Item") or {}
            expired = [
                name
                for name, value in item.items()
                if name.startswith(_SLOT_PREFIX) and float(value["N"]) <= now
            ]
            if not expired:
                return False  # every slot is held and unexpired: at the cap
        return False

    def give_back(self, slot: Slot) -> None:
        # Already reclaimed after its expiry by another request, or given back: no change.
        with contextlib.suppress(self._ddb.exceptions.ConditionalCheckFailedException):
            self._ddb.update_item(
                TableName=self._table,
                Key=self._key(slot),
                UpdateExpression="REMOVE #slot ADD #held :minus",
                ConditionExpression="attribute_exists(#slot)",
                ExpressionAttributeNames={"#slot": _SLOT_PREFIX + slot.slot_id, "#held": _HELD},
                ExpressionAttributeValues={":minus": {"N": "-1"}},
            )
