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

A tenant's queued work per model is capped too (``Tier.max_queued``,
:class:`QueuedWork`): an async or batch-lane request counts from the router's
enqueue until it ends (done, error, expired, cancelled), so one tenant's backlog
cannot grow without end on a model that others use. A sync request counts only from
its hand-off at its deadline (answered 202 and left queued): until then its caller
waits for it, and its tenant's sync slots bound it. Its count is the same kind of
lease, kept compactly: a request's lease ends with its work's expiry (plus a
margin), which whoever ends it can work out from the request alone, so no id is
stored per request (see :class:`DynamoDBQueuedCounts`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from switchyard.tables import RESULTS
from switchyard.together import Together

T = TypeVar("T")
Kind = Literal["streams", "sync_requests"]
# What a tenant can be at the cap of: a kind of slot, or its queued work on a model.
Capped = Kind | Literal["queued"]
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
    """The tenant holds its cap of ``kind`` (on ``model``, for queued work): the
    caller should retry later."""

    def __init__(
        self,
        tenant: str,
        kind: Capped,
        limit: int,
        retry_after_seconds: int,
        model: str | None = None,
    ) -> None:
        if kind == "queued":
            held = f"has {limit} requests queued for {model}, its tier's max_queued"
        else:
            noun = "streams" if kind == "streams" else "sync requests"
            held = f"holds {limit} {noun} at once, its tier's limit"
        super().__init__(f"tenant {tenant} {held}; retry after {retry_after_seconds} s")
        self.tenant = tenant
        self.kind = kind
        self.limit = limit
        self.retry_after_seconds = retry_after_seconds
        self.model = model

    @property
    def code(self) -> str:
        """The error code a caller is answered with (with 429 and Retry-After)."""
        return {"streams": "too_many_streams", "queued": "queue_full"}.get(
            self.kind, "too_many_requests"
        )


class SlotStore(Protocol):
    """Where slots are counted, shared by every router."""

    def take(self, wanted: Sequence[tuple[Slot, int]], now: float) -> list[bool]:
        """Hold each slot of ``wanted`` whose tenant holds fewer than its limit of its
        kind that are unexpired at ``now`` (expired ones are reclaimed), in order;
        False for each at the cap."""
        ...

    def give_back(self, slots: Sequence[Slot]) -> None:
        """Free ``slots``; one already freed or reclaimed changes nothing."""
        ...


def taken_in_groups(
    wanted: Sequence[tuple[T, int]],
    group_of: Callable[[T], Hashable],
    take_all: Callable[[list[T], int], bool],
) -> list[bool]:
    """Whether each of ``wanted`` (a unit and its limit) was taken: the units of one
    group (``group_of``: those one write can take together) with ``take_all``, all
    of them in one write or none; where they do not all fit, each alone, in order,
    so that those that fit are taken."""
    groups: dict[Hashable, list[int]] = {}
    for i, (unit, _) in enumerate(wanted):
        groups.setdefault(group_of(unit), []).append(i)
    taken = [False] * len(wanted)
    for indexes in groups.values():
        units, limit = [wanted[i][0] for i in indexes], wanted[indexes[0]][1]
        if len(units) > 1 and take_all(units, limit):
            for i in indexes:
                taken[i] = True
            continue
        for i, unit in zip(indexes, units, strict=True):
            taken[i] = take_all([unit], limit)
    return taken


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
        # Slots taken and given back by threads at once are written together.
        self._taking = Together(lambda wanted: store.take(wanted, self._clock()))
        self._giving_back = Together(store.give_back)

    def take(self, tenant: str, kind: Kind) -> Slot | None:
        """A slot of ``kind`` for ``tenant`` (None: not capped); :class:`AtCapacity`
        when it holds its cap."""
        limit = self._limits.get(tenant, {}).get(kind)
        if limit is None:
            return None
        slot = Slot(tenant, kind, uuid.uuid4().hex, self._clock() + self._lease[kind])
        if not self._taking((slot, limit)):
            raise AtCapacity(tenant, kind, limit, self._retry_after)
        return slot

    def give_back(self, slot: Slot | None) -> None:
        """Free ``slot``. A failure to is logged, not raised: the request it was
        held for has its answer, and the slot's lease ends by itself."""
        if slot is None:
            return
        try:
            self._giving_back(slot)
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

    def take(self, wanted: Sequence[tuple[Slot, int]], now: float) -> list[bool]:
        return [self._take(slot, limit, now) for slot, limit in wanted]

    def _take(self, slot: Slot, limit: int, now: float) -> bool:
        slots = self.held.setdefault((slot.tenant, slot.kind), {})
        for slot_id in [s for s, expiry in slots.items() if expiry <= now]:
            del slots[slot_id]
        if len(slots) >= limit:
            return False
        slots[slot.slot_id] = slot.expires_at
        return True

    def give_back(self, slots: Sequence[Slot]) -> None:
        for slot in slots:
            self.held.get((slot.tenant, slot.kind), {}).pop(slot.slot_id, None)


class DynamoDBSlotStore:
    """:class:`SlotStore` on the results table: one item per tenant and kind (key
    ``admission#<kind>`` in the tenant's partition), a ``held`` count and one
    attribute per slot holding its expiry.

    Taking slots is one conditional update (``held`` at most the cap less the
    slots taken, plus each slot, plus as many to ``held``). At the cap DynamoDB
    returns the item as it was; if some of its slots have expired the update is
    tried again, removing them in the same write on condition that they are still
    there, so two routers never reclaim one slot twice. Giving back removes the
    slots and counts as many fewer, on condition that each is still there.
    """

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def _key(self, slot: Slot) -> dict[str, Any]:
        return {
            RESULTS.partition: {"S": slot.tenant},
            RESULTS.sort: {"S": _ITEM_PREFIX + slot.kind},
        }

    def take(self, wanted: Sequence[tuple[Slot, int]], now: float) -> list[bool]:
        """The slots of one tenant and kind wanted together are taken in one update
        if all of them fit under the cap; if they do not, each is tried alone, in
        order, so that those that fit are held."""
        return taken_in_groups(
            wanted,
            lambda slot: (slot.tenant, slot.kind),
            lambda slots, limit: self._take_all(slots, limit, now),
        )

    def _take_all(self, slots: list[Slot], limit: int, now: float) -> bool:
        """Hold every one of ``slots`` (one tenant's, of one kind) or none."""
        if len(slots) > limit:
            return False
        expired: list[str] = []
        for _ in range(_ATTEMPTS):
            names = {"#held": _HELD, "#ttl": _TTL}
            values = {
                ":under": {"N": str(limit - len(slots) + 1 + len(expired))},
                ":change": {"N": str(len(slots) - len(expired))},
                ":ttl": {"N": str(int(max(s.expires_at for s in slots)) + _ITEM_LINGER_SECONDS)},
            }
            sets = []
            for i, slot in enumerate(slots):
                names[f"#slot{i}"] = _SLOT_PREFIX + slot.slot_id
                values[f":expiry{i}"] = {"N": f"{slot.expires_at:.3f}"}
                sets.append(f"#slot{i} = :expiry{i}")
            condition = ["(attribute_not_exists(#held) OR #held < :under)"]
            for i, name in enumerate(expired):
                names[f"#gone{i}"] = name
                condition.append(f"attribute_exists(#gone{i})")
            update = f"SET {', '.join(sets)}, #ttl = :ttl ADD #held :change"
            if expired:
                update += " REMOVE " + ", ".join(f"#gone{i}" for i in range(len(expired)))
            try:
                self._ddb.update_item(
                    TableName=self._table,
                    Key=self._key(slots[0]),
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

    def give_back(self, slots: Sequence[Slot]) -> None:
        """One UpdateItem per tenant and kind among ``slots``: each slot removed and
        the count lowered by as many, on condition that every one is still there.
        If one is not (reclaimed after its expiry by another request, or given back
        already), the item as it was says which are, and those are given back."""
        items: dict[tuple[str, Kind], list[Slot]] = {}
        for slot in slots:
            items.setdefault((slot.tenant, slot.kind), []).append(slot)
        for held in items.values():
            self._give_back_held(held)

    def _give_back_held(self, slots: list[Slot]) -> None:
        names = [_SLOT_PREFIX + slot.slot_id for slot in dict.fromkeys(slots)]
        for _ in range(_ATTEMPTS):
            if not names:
                return
            placeholders = {f"#s{i}": name for i, name in enumerate(names)}
            try:
                self._ddb.update_item(
                    TableName=self._table,
                    Key=self._key(slots[0]),
                    UpdateExpression=f"REMOVE {', '.join(placeholders)} ADD #held :minus",
                    ConditionExpression=" AND ".join(
                        f"attribute_exists({p})" for p in placeholders
                    ),
                    ExpressionAttributeNames={**placeholders, "#held": _HELD},
                    ExpressionAttributeValues={":minus": {"N": str(-len(names))}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except self._ddb.exceptions.ConditionalCheckFailedException as exc:
                item = exc.response.get("Item") or {}
            names = [name for name in names if name in item]
        log.warning("slots not given back; their leases end them", extra={"slots": len(names)})


# -- queued work ----------------------------------------------------------------

# A request's queued-work lease ends this long after its work expires (a batch that
# started just before the expiry may still be running), rounded up to the grid: the
# leases that end in one grid step are counted together, so a tenant's item holds
# one count per step with live work, however many requests it has queued.
QUEUED_LEASE_MARGIN_SECONDS = 120
QUEUED_LEASE_GRID_SECONDS = 300
_QUEUED_PREFIX = _ITEM_PREFIX + "queued#"
_STEP_PREFIX = "q_"


@dataclass(frozen=True)
class QueuedLease:
    """A request's place in its tenant's queued work on a model: counted until the
    request ends, or at the latest until ``ends_at``, should whatever ends it crash."""

    tenant: str
    model: str
    ends_at: float

    @property
    def step(self) -> str:
        """The attribute that counts the leases ending when this one does."""
        return f"{_STEP_PREFIX}{int(self.ends_at) // QUEUED_LEASE_GRID_SECONDS}"


def queued_lease(tenant: str, model: str, work_expires_at: float) -> QueuedLease:
    """The lease of a request whose work expires at ``work_expires_at``: the same
    for the router that takes it and the worker or router that gives it back."""
    grid = QUEUED_LEASE_GRID_SECONDS
    ends = math.ceil((work_expires_at + QUEUED_LEASE_MARGIN_SECONDS) / grid) * grid
    return QueuedLease(tenant, model, float(ends))


class QueuedCounts(Protocol):
    """Where tenants' queued work is counted, shared by every router and worker."""

    def take(self, wanted: Sequence[tuple[QueuedLease, int]], now: float) -> list[bool]:
        """Count each lease of ``wanted`` whose tenant has fewer than its limit of
        unexpired leases on its model at ``now`` (expired ones are reclaimed), in
        order; False for each at the cap."""
        ...

    def add(self, lease: QueuedLease, now: float) -> None:
        """Count ``lease`` whatever its tenant has queued, its cap or more."""
        ...

    def give_back(self, lease: QueuedLease, count: int) -> None:
        """Count ``count`` leases like ``lease`` (its tenant, model and end) fewer;
        never below none: leases reclaimed meanwhile are not given back twice."""
        ...


class QueuedWork:
    """Takes and gives back requests' places in their tenant's queued work on a
    model (the domain rule; no AWS here). ``limits``: tenant -> its cap on queued
    requests per model; a tenant not named is not capped. A worker, which only gives
    back, needs no limits."""

    def __init__(
        self,
        store: QueuedCounts,
        limits: Mapping[str, int] | None = None,
        retry_after_seconds: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits = limits or {}
        self._retry_after = retry_after_seconds
        self._clock = clock
        # Places taken by threads at once are counted together (see Together).
        self._taking = Together(lambda wanted: store.take(wanted, self._clock()))

    def capped(self, tenant: str) -> bool:
        return tenant in self._limits

    def take(self, tenant: str, model: str, work_expires_at: float) -> QueuedLease | None:
        """A place for a request of ``tenant`` on ``model`` (None: not capped);
        :class:`AtCapacity` (``queued``) when the tenant has its cap queued there."""
        limit = self._limits.get(tenant)
        if limit is None:
            return None
        lease = queued_lease(tenant, model, work_expires_at)
        if not self._taking((lease, limit)):
            raise AtCapacity(tenant, "queued", limit, self._retry_after, model)
        return lease

    def add(self, tenant: str, model: str, work_expires_at: float) -> QueuedLease | None:
        """A place for a sync request of ``tenant`` on ``model`` handed off at its
        deadline (None: not capped, or not counted). It cannot be refused: its
        message is queued already, so it is counted at the cap too, and the tenant's
        next requests are refused until its queued work drains below the cap. A
        failure is logged, not raised: the request is then queued uncounted."""
        if tenant not in self._limits:
            return None
        lease = queued_lease(tenant, model, work_expires_at)
        try:
            self._store.add(lease, self._clock())
        except Exception:  # noqa: BLE001 - an uncounted request still runs
            log.exception("counting queued work failed", extra={"tenant": tenant, "model": model})
            return None
        return lease

    def give_back(self, leases: Iterable[QueuedLease | None]) -> None:
        """Free these places: one write per tenant, model and lease end, however
        many requests share them (a worker's batch). A failure is logged, not
        raised: the requests have their results, and the leases end by themselves."""
        for lease, count in Counter(lease for lease in leases if lease is not None).items():
            try:
                self._store.give_back(lease, count)
            except Exception:  # noqa: BLE001 - the lease expires in any case
                log.exception(
                    "giving back queued work failed",
                    extra={"tenant": lease.tenant, "model": lease.model},
                )


class InMemoryQueuedCounts:
    """:class:`QueuedCounts` in one process: for unit tests and a router alone."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], Counter[float]] = {}

    def take(self, wanted: Sequence[tuple[QueuedLease, int]], now: float) -> list[bool]:
        return [self._take(lease, limit, now) for lease, limit in wanted]

    def _take(self, lease: QueuedLease, limit: int, now: float) -> bool:
        counts = self.counts.setdefault((lease.tenant, lease.model), Counter())
        for ends in [e for e in counts if e <= now]:
            del counts[ends]
        if sum(counts.values()) >= limit:
            return False
        counts[lease.ends_at] += 1
        return True

    def add(self, lease: QueuedLease, now: float) -> None:
        self.counts.setdefault((lease.tenant, lease.model), Counter())[lease.ends_at] += 1

    def give_back(self, lease: QueuedLease, count: int) -> None:
        counts = self.counts.get((lease.tenant, lease.model), Counter())
        if counts[lease.ends_at] > 0:
            counts[lease.ends_at] -= min(count, counts[lease.ends_at])


class DynamoDBQueuedCounts:
    """:class:`QueuedCounts` on the results table: one item per tenant and model
    (key ``admission#queued#<model>`` in the tenant's partition), a ``held`` count
    and one count per grid step of lease ends (``q_<step>``), which is what lets a
    lease expire: no attribute per request, so the item stays a few hundred bytes
    (one write unit) whatever the cap, where one attribute per request (as
    :class:`DynamoDBSlotStore` keeps) would cost a write unit per ~20 requests
    queued on every write, and could not hold more than ~9,000 (400 KB an item).

    Taking is one conditional update (``held`` at most the cap less the leases
    taken; as many more to ``held`` and to the leases' step). At the cap DynamoDB
    returns the item as it was; steps that have ended are then reclaimed in the
    retried write, on condition that their counts are as read, so no two routers
    reclaim one twice. A write that finds ended steps on its way in (the item as
    written comes back with it) clears them with one more write: an item's ended
    steps are cleared about once per grid step, and an item holds only steps with
    live work.

    Adding (a sync request handed off at its deadline, which cannot be refused) is
    the same update without the condition: one write, whatever ``held`` is. Steps
    that have ended are left to the next take to clear.

    Giving back counts ``n`` fewer on the step and on ``held``, on condition that
    the step holds ``n``; if it holds fewer (some were reclaimed, or given back
    twice by a request that ended twice), it gives back what the step holds.
    """

    def __init__(self, dynamodb: Any, table: str, keep_seconds: int = 2 * 86_400) -> None:
        self._ddb = dynamodb
        self._table = table
        # An idle tenant's item is removed by the table's TTL this long after its
        # last take: longer than any lease (the batch lane's maximum age, a day).
        self._keep = keep_seconds

    def _key(self, lease: QueuedLease) -> dict[str, Any]:
        return {
            RESULTS.partition: {"S": lease.tenant},
            RESULTS.sort: {"S": _QUEUED_PREFIX + lease.model},
        }

    def take(self, wanted: Sequence[tuple[QueuedLease, int]], now: float) -> list[bool]:
        """The leases of one tenant, model and end wanted together are counted in
        one update if all of them fit under the cap; if they do not, each is tried
        alone, in order, so that those that fit are counted."""
        return taken_in_groups(
            wanted,
            lambda lease: lease,
            lambda leases, limit: self._take_all(leases[0], len(leases), limit, now),
        )

    def _take_all(self, lease: QueuedLease, n: int, limit: int, now: float) -> bool:
        """Count ``n`` leases like ``lease``, all of them or none."""
        if n > limit:
            return False
        ended: dict[str, int] = {}
        for _ in range(_ATTEMPTS):
            try:
                new = self._update(lease, n, limit - n + 1, ended, int(now) + self._keep)
            except self._ddb.exceptions.ConditionalCheckFailedException as exc:
                ended = _ended_steps(exc.response.get("Item") or {}, now)
                if not ended:
                    return False  # every count is of a live lease: at the cap
                continue
            later = _ended_steps(new, now)
            if later:
                with contextlib.suppress(self._ddb.exceptions.ConditionalCheckFailedException):
                    self._update(lease, 0, None, later, None)
            return True
        return False

    def add(self, lease: QueuedLease, now: float) -> None:
        self._update(lease, 1, None, {}, int(now) + self._keep)

    def _update(
        self,
        lease: QueuedLease,
        add: int,
        limit: int | None,
        ended: Mapping[str, int],
        ttl: int | None,
    ) -> dict[str, Any]:
        """Add ``add`` to the lease's step and ``held`` (under ``limit`` after the
        ``ended`` steps are removed), removing those on condition that they hold
        what was read. Returns the item as written."""
        names = {"#held": _HELD}
        reclaimed = sum(ended.values())
        values: dict[str, Any] = {":change": {"N": str(add - reclaimed)}}
        adds = ["#held :change"]
        conditions = []
        if add:
            names["#step"] = lease.step
            values[":add"] = {"N": str(add)}
            adds.append("#step :add")
        if limit is not None:
            values[":under"] = {"N": str(limit + reclaimed)}
            conditions.append("(attribute_not_exists(#held) OR #held < :under)")
        for i, (name, count) in enumerate(ended.items()):
            names[f"#gone{i}"] = name
            values[f":was{i}"] = {"N": str(count)}
            conditions.append(f"#gone{i} = :was{i}")
        update = "ADD " + ", ".join(adds)
        if ttl is not None:
            names["#ttl"] = _TTL
            values[":ttl"] = {"N": str(ttl)}
            update = f"SET #ttl = :ttl {update}"
        if ended:
            update += " REMOVE " + ", ".join(f"#gone{i}" for i in range(len(ended)))
        condition = {"ConditionExpression": " AND ".join(conditions)} if conditions else {}
        return self._ddb.update_item(
            TableName=self._table,
            Key=self._key(lease),
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **condition,
        ).get("Attributes", {})

    def give_back(self, lease: QueuedLease, count: int) -> None:
        for _ in range(_ATTEMPTS):
            try:
                self._ddb.update_item(
                    TableName=self._table,
                    Key=self._key(lease),
                    UpdateExpression="ADD #held :minus, #step :minus",
                    ConditionExpression="#step >= :count",
                    ExpressionAttributeNames={"#held": _HELD, "#step": lease.step},
                    ExpressionAttributeValues={
                        ":minus": {"N": str(-count)},
                        ":count": {"N": str(count)},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except self._ddb.exceptions.ConditionalCheckFailedException as exc:
                item = exc.response.get("Item") or {}
            count = min(count, int(item.get(lease.step, {}).get("N", "0")))
            if count <= 0:
                return  # reclaimed after its end, or given back already


def _ended_steps(item: Mapping[str, Any], now: float) -> dict[str, int]:
    """The steps of a queued-work item whose leases have all ended at ``now``, with
    their counts (as read, for the condition that removes them)."""
    grid = QUEUED_LEASE_GRID_SECONDS
    return {
        name: int(value["N"])
        for name, value in item.items()
        if name.startswith(_STEP_PREFIX) and int(name[len(_STEP_PREFIX) :]) * grid <= now
    }
