"""The router's domain logic: admit a request, enqueue it, wait for its result.

It knows no HTTP and no boto3: the FastAPI routes call it, and it reaches AWS only
through the core's small interfaces (registry, results, queues, routing, payloads),
so unit tests run it on in-memory fakes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from switchyard.admission import Admission, Kind, QueuedLease, QueuedWork, Slot, queued_lease
from switchyard.budgets import Budgets
from switchyard.fields import FieldError
from switchyard.generation import PromptTokens, as_request, over_context
from switchyard.idempotency import IdempotencyKeys, KeyReused, KeyUse
from switchyard.payloads import PayloadStore
from switchyard.queues import ModelLanes, encode_message
from switchyard.registry import ModelVersion, Registry
from switchyard.result_cache import ResultCache, Sightings, cache_key, cacheable
from switchyard.results import ResultStore
from switchyard.routing import (
    RoutingDocument,
    RoutingSource,
    bucket_of,
    pick_version,
    role_of,
    shadow_version,
)
from switchyard.schemas import (
    ErrorInfo,
    GenerationSignature,
    Lane,
    QueueMessage,
    ResultRecord,
    TensorSignature,
)
from switchyard.signatures import check_inputs
from switchyard.stats import percentile
from switchyard_router.outcome import Admitted, Outcome
from switchyard_router.waiters import ResultWaiters

MAX_DEADLINE_MS = 28_000  # below API Gateway's 29 s integration timeout
# With a fallback version, it is asked once the chosen version has failed an
# attempt, or once this share of the deadline has passed without a result.
FALLBACK_AFTER_SHARE = 0.7

# Result polling (see PredictService.wait and LookSchedule).
_FIRST_EXPECTED_S = 0.02
_MIN_POLL_S = 0.005
# The longest gap between looks for an idle model's requests (LookSchedule.next_gap).
_LONGEST_GAP_S = 0.25

log = logging.getLogger("switchyard.router")


class RequestRejected(Exception):
    """The caller's mistake: answered with ``status`` and nothing is enqueued."""

    def __init__(
        self, status: int, code: str, message: str, errors: list[FieldError] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors or []

    def rename_fields(self, rename: Callable[[str], str]) -> None:
        """Its fields named as the caller of an API on top of predict's named them."""
        self.errors = [FieldError(rename(e.field), e.message) for e in self.errors]


@dataclass(frozen=True)
class Assignment:
    """The version a request goes to, and what chose it."""

    version: ModelVersion
    document: RoutingDocument | None  # the routing document (none for a pinned request)
    sticky_value: str
    pinned: bool = False


@dataclass(frozen=True)
class Work:
    """Where a request's work runs and until when."""

    lane: Lane
    waits: bool  # a sync caller waits for its result
    budget_s: float  # the caller's deadline, from now
    now: float
    expires_at: float  # epoch seconds: not started by then, it is answered expired


@dataclass(frozen=True)
class Idempotent:
    """A request's Idempotency-Key and the fingerprint of what it asks for
    (``switchyard.idempotency.fingerprint``)."""

    key: str
    fingerprint: str

    def use(self, tenant: str, queued: ResultRecord) -> KeyUse:
        """The key as this request claims it: for as long as its result is kept,
        pointing at its queued record (what a replay answers from)."""
        return KeyUse(
            tenant=tenant,
            key=self.key,
            fingerprint=self.fingerprint,
            request_id=queued.request_id,
            expires_at=queued.expires_at,
            answer=queued.model_dump_json(),
        )


class LookSchedule:
    """When the router looks for a request's result. Every look is a read of the
    results table (an AWS call, and CPU in the router), so looks go where results
    are: at the median and the 90th percentile of how long this model's recent
    requests took to be answered, then further apart. A request therefore costs
    about two looks whatever the load, and its answer waits to be picked up by a
    share of the spread of those times, not of their mean.

    Two looks, not three: a look between the median and the 90th percentile (the
    80th, as the schedule had it) found few answers the 90th would not have found
    soon after. Replayed on the answer times of 16 closed-loop callers it cost 0.11
    looks a request for 1.1 ms of pick-up; on the local platform at 75 and 80
    requests/s, open loop, requests took 1.9 to 2.0 looks with two, 2.2 to 2.3 with
    three, and each look is CPU the model's cores lose (``docs/benchmarks.md``).

    Recent is the last 64 answers of the last 5 seconds, or the last 8 where fewer
    came in that time. Over 16 alone, at load, the 90th percentile is among their
    largest and the median moves with every batch (two batches' answers at 16
    callers); the 5 seconds let a load that has fallen, or an overload that has
    passed, leave the window within seconds. Within them, the first look is at the
    median of the last 8 answers where that is earlier: near saturation the queue
    builds and drains within a second, and while it drains the answers are ready
    sooner than the 64 before them say (the sync-calls goal in
    ``docs/benchmarks.md`` has the open-loop runs that showed it).

    How long a request took is read from its result, not from when a look found
    it: the worker stamps its ``completed_at`` as it stores it, so the looks' own
    spacing never feeds back into the schedule."""

    QUANTILES = (50.0, 90.0)

    def __init__(
        self,
        keep: int = 64,
        horizon_s: float = 5.0,
        fewest: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keep = keep
        self._horizon = horizon_s
        self._fewest = fewest
        self._clock = clock
        self._took: dict[str, deque[tuple[float, float]]] = {}

    def saw(self, model: str, seconds: float) -> None:
        """A request of ``model`` was answered ``seconds`` after its wait began."""
        took = self._took.get(model)
        if took is None:
            took = self._took[model] = deque(maxlen=self._keep)
        took.append((self._clock(), max(seconds, 0.0)))

    def recent(self, model: str) -> list[float]:
        """The answer times the looks are timed by (see the class)."""
        took = list(self._took.get(model) or ())  # one copy: other threads append
        since = self._clock() - self._horizon
        recent = [seconds for at, seconds in took if at >= since]
        if len(recent) >= self._fewest:
            return recent
        return [seconds for _, seconds in took[-self._fewest :]]

    def idle(self, model: str) -> bool:
        """No answer of ``model`` came within the window's seconds (answers are kept
        in the order they came, so the newest tells)."""
        took = self._took.get(model)
        return not took or took[-1][0] < self._clock() - self._horizon

    def looks(self, model: str) -> list[float]:
        """The first looks, in seconds from the start of the wait: at least 5 ms
        apart, and each at most half as late again as the one before (a spread of
        times, as when load changes, is looked at more closely). For an idle model
        none is more than 250 ms after the one before (see :meth:`next_gap`)."""
        took = self.recent(model)
        if not took:
            return [_FIRST_EXPECTED_S]
        times: list[float] = []
        for q in self.QUANTILES:
            at = percentile(took, q)
            if times:  # at least 5 ms after the look before, at most half again
                at = min(max(at, times[-1] + _MIN_POLL_S), times[-1] * 1.5 + _MIN_POLL_S)
            times.append(at)
        # Answers faster of late (a queue draining) are looked for at their median.
        times[0] = min(times[0], percentile(took[-self._fewest :], 50.0))
        if self.idle(model):
            before = 0.0
            for i, at in enumerate(times):
                times[i] = before = min(at, before + _LONGEST_GAP_S)
        return times

    def next_gap(self, model: str, waited: float) -> float:
        """The gap before the next look once the first looks found nothing: a
        quarter of the time waited so far (at least 5 ms), so that an answer later
        than these requests' times, as when load rises, costs a few looks more and
        waits at most a quarter of its time to be picked up.

        For an idle model (no answer in the window's seconds) the gaps are at most
        250 ms: what its last answers took says little about this one, as its workers
        may have gone meanwhile (a model at zero answers its first request once a
        worker has started, seconds later, and its next ones in milliseconds), so
        its answer is picked up within 250 ms, not within a quarter of a wait of
        seconds. Idle ends with the model's next answer: the requests waiting then
        look a quarter of their wait apart again. A model that answers, however
        slowly or rarely, keeps its requests' looks where its answers come."""
        gap = max(waited / 4, _MIN_POLL_S)
        return min(gap, _LONGEST_GAP_S) if self.idle(model) else gap


class VersionCache:
    """Version records change rarely (only their status): cache them briefly."""

    def __init__(self, registry: Registry, ttl_seconds: float = 10.0) -> None:
        self._registry = registry
        self._ttl = ttl_seconds
        self._entries: dict[str, tuple[float, dict[str, ModelVersion]]] = {}

    def versions(self, model: str, fresh: bool = False) -> dict[str, ModelVersion]:
        """``fresh``: read the registry now (a version asked for by name that the
        cache does not have may have been registered since)."""
        now = time.monotonic()
        entry = self._entries.get(model)
        if fresh or entry is None or now - entry[0] >= self._ttl:
            entry = (now, {v.version: v for v in self._registry.versions(model)})
            self._entries[model] = entry
        return entry[1]


class PredictService:
    def __init__(
        self,
        *,
        endpoints: Mapping[str, ModelLanes],
        registry: Registry,
        results: ResultStore,
        payloads: PayloadStore,
        routing: RoutingSource | None,
        result_ttl_seconds: int,
        claim_check_bytes: int,
        max_age_seconds: Mapping[str, int] | None = None,
        sync_grace_seconds: int = 60,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        prompt_tokens: PromptTokens | None = None,
        cache: ResultCache | None = None,
        admission: Admission | None = None,
        budgets: Budgets | None = None,
        queued_work: QueuedWork | None = None,
        idempotency: IdempotencyKeys | None = None,
    ) -> None:
        self._endpoints = endpoints
        # Callers' Idempotency-Keys (None: the header is not taken).
        self._keys = idempotency
        # Tenants' monthly budgets (None: none is held to one).
        self.budgets = budgets
        # Each tenant's cap on streams and sync requests at once (None: uncapped).
        self.admission = admission
        # Each tenant's cap on its requests queued per model (None: uncapped).
        self._queued_work = queued_work
        self._cache = cache
        self._sightings = Sightings()  # inputs are cached from their second sight
        self._prompt_tokens = prompt_tokens
        self._versions = VersionCache(registry)
        self._results = results
        self._payloads = payloads
        self._routing = routing
        self._ttl = result_ttl_seconds
        self._claim_check_bytes = claim_check_bytes
        self._max_age = dict(max_age_seconds or {"realtime": 3_600, "batch": 86_400})
        self._sync_grace = sync_grace_seconds
        self._clock = clock
        self._looks = LookSchedule()
        # Every sync request's looks for its result, read together.
        self._waiters = ResultWaiters(results, sleep)

    @property
    def models(self) -> list[str]:
        return sorted(self._endpoints)

    def hold(self, tenant: str, kind: Kind) -> AbstractContextManager[Slot | None]:
        """One of ``tenant``'s ``kind`` slots for a ``with`` block (entering it
        raises :class:`switchyard.admission.AtCapacity` at the cap)."""
        if self.admission is None:
            return nullcontext()
        return self.admission.holding(tenant, kind)

    def take_slot(self, tenant: str, kind: Kind) -> Slot | None:
        """A slot held past this call (a stream's), given back with :meth:`give_slot`."""
        return self.admission.take(tenant, kind) if self.admission else None

    def give_slot(self, slot: Slot | None) -> None:
        if self.admission is not None:
            self.admission.give_back(slot)

    def routing_document(self, model: str) -> RoutingDocument | None:
        return self._routing.document(model) if self._routing else None

    def active_version(self, model: str, version: str | None) -> ModelVersion | None:
        record = self._versions.versions(model).get(version) if version else None
        return record if record is not None and record.status == "active" else None

    def pinned_version(self, model: str, version: str) -> ModelVersion:
        """The version a caller asked for by name; 404 unless it is active."""
        if version not in self._versions.versions(model):
            self._versions.versions(model, fresh=True)
        record = self.active_version(model, version)
        if record is None:
            active = sorted(
                v.version for v in self._versions.versions(model).values() if v.status == "active"
            )
            known = self._versions.versions(model).get(version)
            why = "is not active" if known is not None else "does not exist"
            raise RequestRejected(
                404,
                "unknown_version",
                f"version {version!r} of {model!r} {why}; active versions: "
                f"{', '.join(active) or 'none'}",
                [FieldError("version", why)],
            )
        return record

    def choose_version(
        self, model: str, sticky_value: str, document: RoutingDocument | None = None
    ) -> ModelVersion:
        versions = self._versions.versions(model)
        active = [v for v in versions.values() if v.status == "active"]
        if document is not None:
            chosen = versions.get(pick_version(document, sticky_value))
            if chosen is not None and chosen.status == "active":
                return chosen
        if not active:
            raise RequestRejected(
                404, "no_version", f"model {model!r} has no active version registered"
            )
        # No routing document (or it names nothing usable): the newest active version.
        return max(active, key=lambda v: v.created_at)

    def submit(
        self,
        *,
        model: str,
        tenant: str,
        inputs: Any,
        sticky_headers: Mapping[str, str],
        deadline_ms: int | None,
        lane: str = "realtime",
        is_async: bool = False,
        pinned: str | None = None,
        cache_lookup: bool = True,
        idempotent: Idempotent | None = None,
    ) -> Admitted:
        """Validate, record as queued, enqueue. Raises RequestRejected on bad input.
        The sticky key is the header the routing document names, else the tenant.
        A ``pinned`` version answers alone: no canary assignment, shadow or fallback.

        The work expires at a sync caller's deadline plus the hand-off's grace (the
        caller answered 202 at its deadline may still collect it), or after the
        lane's maximum age for async work; the result's TTL is separate.

        A cacheable request (``switchyard.result_cache``) whose inputs this router
        has seen before is looked up in the cache (unless ``cache_lookup`` is off:
        the caller's ``Cache-Control: no-cache``) and, if this tenant had them
        answered by this version, answered from it instead of queued; a miss carries
        its cache key to the worker, which fills the entry. Inputs seen for the
        first time cost the cache nothing: no read, no entry.

        With an ``idempotent`` key (``switchyard.idempotency``), a key used before
        by the same body answers with the first request (:meth:`_replay`), before
        any check, budget or cap; a new key is claimed just before the work is
        enqueued, and given back if it is not."""
        started = self._clock()
        if idempotent is not None and self._keys is not None:
            earlier = key_use(
                self._keys.earlier, tenant, idempotent.key, idempotent.fingerprint, started
            )
            if earlier is not None:
                return self._replay(earlier, is_async, deadline_ms, started)
        if self.budgets is not None:  # over its budget: refused, or moved to the batch lane
            lane = self.budgets.lane_for(tenant, lane)
        assignment = self._assign(model, tenant, sticky_headers, pinned)
        self._check(assignment.version, inputs)
        work = self._work(assignment.version, lane, is_async, deadline_ms)
        key = self._cache_key(tenant, assignment.version, inputs, work)
        queued = self._queued_record(tenant, assignment.version, work)
        use = None
        if idempotent is not None and self._keys is not None:
            use = idempotent.use(tenant, queued)
            first = key_use(self._keys.claim, use, started)
            if first is not None:  # another request with this key won it meanwhile
                return self._replay(first, is_async, deadline_ms, started)
        if key is not None and cache_lookup:
            keyed_id = queued.request_id if use is not None else None
            hit = self._from_cache(
                model, assignment.version, tenant, key, is_async, started, keyed_id
            )
            if hit is not None:
                return hit
        queued_work = self._queued_work
        lease = None
        try:
            if queued_work is not None and queued.queued_counted:
                lease = queued_work.take(tenant, model, work.expires_at)
            if not work.waits:
                self._results.put_queued(queued)
            message = self._enqueue(
                queued, inputs, work, key, counted=lease is not None, rows=_rows(assignment)
            )
        except Exception:
            self._give_back_queued(lease)
            if use is not None and self._keys is not None:
                self._keys.release(use)  # not enqueued: the caller's retry is a first
            raise
        admitted = self._admitted(queued, assignment, inputs, work, started, message)
        self._shadow(admitted, assignment.document)
        _log_assignment(admitted, assignment)
        return admitted

    def answer(self, admitted: Admitted, *, wait: bool = True) -> Outcome:
        """How the request ends for its caller: its result within its deadline, or
        queued (async, in the batch lane, or past its deadline: :meth:`wait`)."""
        if not wait or (admitted.queued is not None and admitted.queued.lane == "batch"):
            return Outcome(admitted)  # batch-lane work is not waited for
        return Outcome(admitted, self.wait(admitted, admitted.tenant))

    def _assign(
        self, model: str, tenant: str, sticky_headers: Mapping[str, str], pinned: str | None
    ) -> Assignment:
        """The version the request goes to: the pinned one, else the routing
        document's choice for its sticky key."""
        if model not in self._endpoints:
            raise RequestRejected(404, "unknown_model", f"model {model!r} does not exist")
        document = None if pinned else self.routing_document(model)
        sticky_header = (document.sticky_key if document else "x-user-id").lower()
        sticky_value = sticky_headers.get(sticky_header) or tenant
        if pinned:
            return Assignment(self.pinned_version(model, pinned), None, sticky_value, pinned=True)
        return Assignment(
            self.choose_version(model, sticky_value, document), document, sticky_value
        )

    def _check(self, version: ModelVersion, inputs: Any) -> None:
        """The inputs against the version's signature (422), and a generation's
        prompt and max_tokens against its context (400)."""
        errors = check_inputs(inputs, version.signature, version.max_inputs_per_request)
        if errors:
            message = f"inputs do not match {version.model}'s signature"
            raise RequestRejected(422, "invalid_input", message, errors)
        if isinstance(version.signature, GenerationSignature):
            self._check_context(version, inputs)

    def _work(
        self, version: ModelVersion, lane: str, is_async: bool, deadline_ms: int | None
    ) -> Work:
        lane_name: Lane = "batch" if lane == "batch" else "realtime"
        now = self._clock()
        budget_s = (deadline_ms if deadline_ms is not None else version.default_deadline_ms) / 1000
        waits = not is_async and lane_name == "realtime"  # a sync caller waits for it
        expires_at = now + budget_s + self._sync_grace if waits else now + self._max_age[lane_name]
        return Work(lane_name, waits, budget_s, now, expires_at)

    def _cache_key(self, tenant: str, version: ModelVersion, inputs: Any, work: Work) -> str | None:
        """The inputs' cache key, once this router has seen them before for this
        tenant and version; None where the result cache has no part."""
        generative = isinstance(version.signature, GenerationSignature)
        if (
            self._cache is None
            or work.lane != "realtime"
            or not cacheable(version.result_cache_seconds, inputs, generative)
        ):
            return None
        digest = cache_key(inputs)
        seen = self._sightings.seen_before(tenant, version.model, version.version, digest)
        return digest if seen else None

    def _queued_record(self, tenant: str, version: ModelVersion, work: Work) -> ResultRecord:
        """The request's record as queued. An async or batch request's is written
        before it is enqueued; a sync request answered within its deadline needs
        none (the worker's result is its first write), so it is written only if the
        request is handed off (202) at its deadline.

        An async or batch request of a capped tenant is counted in its tenant's
        queued work from its enqueue. A sync one is not: its caller waits, and the
        tenant's sync slots bound it; it is counted from its hand-off, if it is
        handed off (:meth:`hand_off`), which is when it becomes queued work."""
        return ResultRecord(
            request_id=uuid.uuid4().hex,
            tenant=tenant,
            model=version.model,
            version=version.version,
            status="queued",
            lane=work.lane,
            created_at=work.now,
            expires_at=int(work.now + self._ttl),
            work_expires_at=work.expires_at,
            queued_counted=not work.waits and self._counts(tenant),
        )

    def _counts(self, tenant: str) -> bool:
        """Whether the router counts ``tenant``'s requests in its queued work (its
        tier caps it). Only the router's own requests are: a job's chunks (held to
        their tenant's budget) and shadow copies (the platform's work) never have a
        record of the router's."""
        return self._queued_work is not None and self._queued_work.capped(tenant)

    def _replay(
        self, first: KeyUse, is_async: bool, deadline_ms: int | None, started: float
    ) -> Admitted:
        """A request whose Idempotency-Key was used before with the same body:
        answered as the first request would be answered now, and nothing sent. Its
        result is waited for up to this caller's deadline (sync; the first request's
        worker stores it), or it is answered 202 and its location (async, or batch
        lane): its queued record is written if the first request had none yet (a
        sync request still running). No fallback or shadow copy is sent: those are
        the first request's."""
        queued = ResultRecord.model_validate_json(first.answer)
        waits = not is_async and queued.lane == "realtime"
        version = self._versions.versions(queued.model).get(queued.version)
        default_ms = version.default_deadline_ms if version is not None else MAX_DEADLINE_MS
        budget_s = (deadline_ms if deadline_ms is not None else default_ms) / 1000
        if not waits:
            self._results.put_queued(queued)  # no change where it has a record
        return Admitted(
            request_id=queued.request_id,
            model=queued.model,
            version=queued.version,
            tenant=queued.tenant,
            deadline=time.monotonic() + budget_s,
            budget_s=budget_s,
            expires_at=queued.work_expires_at or 0.0,
            queued=queued,
            recorded=not waits,
            replayed=True,
            timings={"received_at": started, "router_ms": (self._clock() - started) * 1000},
        )

    def _enqueue(
        self,
        queued: ResultRecord,
        inputs: Any,
        work: Work,
        key: str | None,
        counted: bool = False,
        rows: bool = False,
    ) -> QueueMessage:
        """Send the request's message to its lane (``rows``: its inputs are a tensor
        signature's, sent as one block of numbers). A send that fails leaves an error
        result behind, never a request "queued" forever."""
        message = QueueMessage(
            request_id=queued.request_id,
            tenant=queued.tenant,
            model=queued.model,
            version=queued.version,
            lane=work.lane,
            inputs=inputs,
            n_inputs=len(inputs),
            enqueued_at=self._clock(),
            expires_at=work.expires_at,
            respond_by=work.now + work.budget_s if work.waits else None,
            cache_key=key,
            queued_counted=counted,
        )
        lanes = self._endpoints[queued.model]
        queue = lanes.batch if work.lane == "batch" else lanes.realtime
        try:
            queue.send(
                encode_message(message, self._payloads, self._claim_check_bytes, rows=rows),
                queued.tenant,
            )
        except Exception:
            self._results.complete(_not_queued(queued, self._clock()))
            raise
        return message

    def _admitted(
        self,
        queued: ResultRecord,
        assignment: Assignment,
        inputs: Any,
        work: Work,
        started: float,
        message: QueueMessage,
    ) -> Admitted:
        enqueued = self._clock()
        return Admitted(
            request_id=queued.request_id,
            model=queued.model,
            version=queued.version,
            tenant=queued.tenant,
            deadline=time.monotonic() + work.budget_s,
            budget_s=work.budget_s,
            inputs=inputs,
            expires_at=work.expires_at,
            fallback=self._fallback_for(assignment),
            role="pinned" if assignment.pinned else role_of(assignment.document, queued.version),
            queued=queued,
            recorded=not work.waits,
            queued_counted=message.queued_counted,
            rows=_rows(assignment),
            timings={
                "received_at": started,
                "enqueued_at": message.enqueued_at,
                "router_ms": (message.enqueued_at - started) * 1000,
                "enqueue_ms": (enqueued - message.enqueued_at) * 1000,
            },
        )

    def _fallback_for(self, assignment: Assignment) -> str | None:
        """The active version that answers if the chosen one cannot (none for a
        pinned request)."""
        if assignment.pinned:
            return None
        version = assignment.version
        named = (assignment.document.fallback if assignment.document else None) or version.fallback
        fallback = self.active_version(version.model, named)
        return fallback.version if fallback and fallback.version != version.version else None

    def _shadow(self, admitted: Admitted, document: RoutingDocument | None) -> None:
        """A copy to the shadow version, where the routing document asks for one.
        Sent before the caller is answered: in Lambda nothing may run after the
        handler returns (the environment is frozen). It costs one enqueue."""
        if document is None:
            return
        shadow = shadow_version(document, admitted.request_id, admitted.version)
        if shadow and self.active_version(admitted.model, shadow):
            admitted.shadow = shadow
            self._send_copy(admitted, shadow, "shadow")

    def _from_cache(
        self,
        model: str,
        version: ModelVersion,
        tenant: str,
        key: str,
        is_async: bool,
        started: float,
        keyed_id: str | None = None,
    ) -> Admitted | None:
        """The request answered from the cache, or None on a miss (or if the cache
        cannot be read: then the request is queued as usual). An async answer is
        stored as the request's result, so that reading it back works as always; a
        sync one is answered at once and not stored, unless its Idempotency-Key
        may replay it (``keyed_id``: the id the key holds, the request's id)."""
        try:
            outputs = self._cache.get(tenant, model, version.version, key)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - a cache outage costs a model run, never an answer
            log.exception("result cache read failed")
            return None
        if outputs is None:
            return None
        now = self._clock()
        record = ResultRecord(
            request_id=keyed_id or uuid.uuid4().hex,
            tenant=tenant,
            model=model,
            version=version.version,
            status="done",
            lane="realtime",  # batch-lane work is never cached
            outputs=outputs,
            timings={"received_at": now, "cache_ms": (now - started) * 1000},
            created_at=started,
            completed_at=now,
            expires_at=int(now + self._ttl),
            worker="result-cache",
        )
        if is_async or keyed_id:
            self._results.complete(record)
        return Admitted(
            request_id=record.request_id,
            model=model,
            version=version.version,
            tenant=tenant,
            deadline=time.monotonic(),
            budget_s=0.0,
            role="cached",
            timings={"received_at": started, "router_ms": (now - started) * 1000},
            cached=record,
        )

    def active_versions(self, model: str) -> list[ModelVersion]:
        return [v for v in self._versions.versions(model).values() if v.status == "active"]

    def _check_context(self, version: ModelVersion, inputs: list[Any]) -> None:
        """Refuse (400) a generation whose prompt and max_tokens are over the model's
        context, counted with the version's own tokenizer, before anything is queued."""
        signature = version.signature
        assert isinstance(signature, GenerationSignature)
        if self._prompt_tokens is None or not version.tokenizer_uri or not version.tokenizer_sha256:
            return  # the worker refuses it instead (an error result)
        for i, item in enumerate(inputs):
            request = as_request(item)
            count = self._prompt_tokens.count(
                version.tokenizer_uri, version.tokenizer_sha256, request.prompt
            )
            why = over_context(count, request.max_tokens, signature.context_length)
            if why:
                raise RequestRejected(
                    400,
                    "context_length_exceeded",
                    why,
                    [FieldError(f"inputs[{i}].prompt", why)],
                )

    def _send_copy(self, admitted: Admitted, version: str, kind: str) -> None:
        """Send the request again to another version: a shadow copy on the batch
        lane under its own id, or the fallback on the realtime lane under the same id."""
        shadow = kind == "shadow"
        message = QueueMessage(
            request_id=f"{admitted.request_id}-shadow" if shadow else admitted.request_id,
            tenant=admitted.tenant,
            model=admitted.model,
            version=version,
            lane="batch" if shadow else "realtime",
            inputs=admitted.inputs,
            n_inputs=len(admitted.inputs),
            enqueued_at=self._clock(),
            expires_at=admitted.expires_at,
            shadow_of=admitted.request_id if shadow else None,
            fallback=not shadow,
            # the fallback is the same request: whichever copy is stored gives back
            queued_counted=admitted.queued_counted and not shadow,
        )
        endpoint = self._endpoints[admitted.model]
        queue = endpoint.batch if shadow else endpoint.realtime
        try:
            queue.send(
                encode_message(
                    message, self._payloads, self._claim_check_bytes, rows=admitted.rows
                ),
                f"shadow:{admitted.tenant}" if shadow else admitted.tenant,
            )
        except Exception:  # noqa: BLE001 - a lost copy must never fail the caller
            log.exception("%s copy to %s not sent", kind, version)

    def wait(self, admitted: Admitted, tenant: str) -> ResultRecord | None:
        """The final result, or None if the deadline passes first. Asks the fallback
        version once if the chosen one fails an attempt or the deadline draws near.
        Looks for it when :class:`LookSchedule` says, its looks read with the other
        requests' due then (:class:`ResultWaiters`)."""
        if admitted.cached is not None:
            return admitted.cached
        started = time.monotonic()
        wall_started = self._clock()
        first = self._looks.looks(admitted.model)
        waiter = self._waiters.join(tenant, admitted.request_id)
        try:
            while True:
                at = first.pop(0) if first else None
                waited = time.monotonic() - started
                gap = (
                    at - waited if at is not None else self._looks.next_gap(admitted.model, waited)
                )
                remaining = admitted.deadline - time.monotonic()
                record = self._waiters.look(waiter, max(min(gap, remaining), 0.0))
                if record is not None and record.status != "queued":
                    if record.completed_at is not None and not admitted.replayed:
                        self._looks.saw(admitted.model, record.completed_at - wall_started)
                    return record
                remaining = admitted.deadline - time.monotonic()
                if admitted.fallback and not admitted.fell_back:
                    if record is not None and record.failures > 0:
                        admitted.fell_back = "failure"
                    elif remaining < admitted.budget_s * (1 - FALLBACK_AFTER_SHARE):
                        admitted.fell_back = "deadline"
                    if admitted.fell_back:
                        self._send_copy(admitted, admitted.fallback, "fallback")
                if remaining <= 0:
                    return self.hand_off(admitted)
        finally:
            self._waiters.leave(waiter)

    def hand_off(self, admitted: Admitted, counted: bool = True) -> ResultRecord | None:
        """A sync request past its deadline, about to be answered 202: its queued
        record is written now, so that its ``Location`` reads it (and expires it if
        no worker takes it up). Returns the final result instead if the worker stored
        it in the meantime.

        From now on it is queued work: a capped tenant's is counted in its queued
        work first, at the cap or over it (its message is queued already, so the
        hand-off cannot be refused), and its record says so, so that whoever ends it
        over that record gives the place back. If the record cannot be written (its
        result is there first, or a queued record that says nothing of the place: a
        worker's with a failed attempt, a replay's), the place is given back at once,
        as no one else would: the request has ended, or runs on uncounted.

        ``counted`` False: a stream whose tokens flow is recorded, not handed off (its
        caller holds a stream slot until its end), and counts for nothing."""
        if admitted.recorded or admitted.queued is None:
            return None
        admitted.recorded = True
        queued = admitted.queued
        lease = None
        if counted and self._queued_work is not None and self._counts(queued.tenant):
            assert queued.work_expires_at is not None
            lease = self._queued_work.add(queued.tenant, queued.model, queued.work_expires_at)
        if lease is not None:
            queued = queued.model_copy(update={"queued_counted": True})
        if self._results.put_queued(queued):
            return None
        self._give_back_queued(lease)
        record = self._results.get(admitted.tenant, admitted.request_id)
        return record if record is not None and record.status != "queued" else None

    def status(self, tenant: str, request_id: str) -> ResultRecord | None:
        """The request's record. One still queued after its work expired is answered
        ``expired`` (and stored so: no worker will run it now)."""
        record = self._results.get(tenant, request_id)
        if (
            record is not None
            and record.status == "queued"
            and record.work_expires_at is not None
            and self._clock() > record.work_expires_at
        ):
            at = self._clock()
            expired = self._results.expire(record, at)
            if _ended_here(expired, at):
                self._give_back_queued(self._lease_of(expired))
            return expired
        return record

    def cancel(self, tenant: str, request_id: str) -> ResultRecord | None:
        """Cancel a request that has not run; a worker that receives it deletes it
        without running. The record as it stands after (a finished request keeps its
        result); None for a request this tenant does not have."""
        record = self.status(tenant, request_id)
        if record is None or record.status != "queued":
            return record
        at = self._clock()
        cancelled = self._results.cancel(tenant, request_id, at)
        if _ended_here(cancelled, at):
            self._give_back_queued(self._lease_of(cancelled))
        return cancelled

    def _lease_of(self, record: ResultRecord) -> QueuedLease | None:
        """The place a request ended here held in its tenant's queued work: one its
        record says the router counted (an async request's at its enqueue, a sync
        one's at its hand-off). A record written before records said so has none
        to give back here: its place ends by itself with its lease."""
        if self._queued_work is None or not record.queued_counted or record.work_expires_at is None:
            return None
        return queued_lease(record.tenant, record.model, record.work_expires_at)

    def _give_back_queued(self, lease: QueuedLease | None) -> None:
        if self._queued_work is not None:
            self._queued_work.give_back([lease])

    def catalog(self) -> list[dict[str, Any]]:
        return [
            {
                "model": model,
                "versions": [
                    {
                        "version": v.version,
                        "status": v.status,
                        "runtime": v.runtime,
                        "created_at": v.created_at,
                        "max_batch_size": v.max_batch_size,
                        "max_wait_ms": v.max_wait_ms,
                        "default_deadline_ms": v.default_deadline_ms,
                    }
                    for v in sorted(
                        self._versions.versions(model).values(), key=lambda v: v.created_at
                    )
                ],
            }
            for model in self.models
        ]


def key_use(call: Callable[..., KeyUse | None], *args: Any) -> KeyUse | None:
    """``call`` (an :class:`IdempotencyKeys` look-up or claim), its key used with
    another body refused as the caller's mistake (422, naming the header)."""
    try:
        return call(*args)
    except KeyReused as exc:
        raise RequestRejected(exc.status, exc.code, str(exc), exc.errors) from None


def _ended_here(record: ResultRecord | None, at: float) -> bool:
    """Whether this router's write at ``at`` ended the request (cancelled or
    expired it), not a result stored first by a worker (which gives its place back)."""
    return record is not None and record.status != "queued" and record.completed_at == at


def _rows(assignment: Assignment) -> bool:
    """Whether the request's inputs are rows of a tensor signature (its version's,
    checked against it): sent as one block of numbers."""
    return isinstance(assignment.version.signature, TensorSignature)


def _not_queued(queued: ResultRecord, at: float) -> ResultRecord:
    """The error result of a request whose message could not be sent."""
    return queued.model_copy(
        update={
            "status": "error",
            "lane": "realtime",
            "error": ErrorInfo(code="enqueue_failed", message="the request was not queued"),
            "completed_at": at,
            "work_expires_at": None,
        }
    )


def _log_assignment(admitted: Admitted, assignment: Assignment) -> None:
    document = assignment.document
    log.info(
        json.dumps(
            {
                "message": "assignment",
                "request_id": admitted.request_id,
                "tenant": admitted.tenant,
                "model": admitted.model,
                "version": admitted.version,
                "bucket": bucket_of(assignment.sticky_value),
                "weights": document.weights if document else None,
                "shadow": admitted.shadow,
                "fallback": admitted.fallback,
                "pinned": assignment.pinned,
            }
        )
    )
