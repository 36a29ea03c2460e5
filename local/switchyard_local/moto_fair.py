"""SQS fair queues in the local emulator: one message group's backlog does not hold
back the other groups' messages.

What AWS documents (Amazon SQS Developer Guide, "Amazon SQS fair queues" and "How
Amazon SQS fair queues work",
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-fair-queues.html
and ``.../sqs-fair-queues-detailed.html``):

- any standard queue whose messages carry a ``MessageGroupId`` is fair; the group is
  the tenant, and each message without a group is a tenant of its own;
- a tenant is a noisy neighbour when it holds more than 10% of the queue's in-flight
  messages and at least 30 of them (concurrency share), or when its share of the
  consumers' recent processing time exceeds 10% (processing time share); the
  thresholds are approximate;
- while there is a noisy neighbour, a receive returns quiet tenants' messages
  whenever any are waiting; a noisy neighbour's messages are neither dropped nor
  throttled, and are returned as usual when no quiet message waits; among several
  noisy neighbours, the one with the fewest messages in flight comes first;
- a tenant stops being noisy when its backlog is drained or it has sent nothing for
  5 minutes;
- CloudWatch shows it: ``ApproximateNumberOfNoisyGroups`` and the
  ``...InQuietGroups`` counts and age.

AWS does not publish the algorithm: how "recent" processing time is weighed, how
quickly a tenant is found noisy, or in what order quiet tenants' messages come (a
standard queue's order is best effort).

What the emulator does, at each ReceiveMessage on a standard queue (FIFO queues keep
moto's order), with what moto keeps and a small ledger per queue:

1. :func:`assess` judges each group by both documented rules, from the queue's
   in-flight messages (moto's pending set: received, not deleted, not yet visible
   again) and the ledger: the time each receive held its message (until the
   message was deleted, became visible again, or moved to the DLQ), halved every
   ``HALF_LIFE_S``, plus the time so far of the receives under way. Messages
   without a group are tenants of one message each: never noisy, and their time
   counts in the queue's total;
2. with no noisy group, the receive walks the queue in order, as before, and stops
   once it has its count;
3. with one, :func:`receive_order` hands out quiet messages (other groups', and
   those without a group) first, in queue order; then the noisy groups' messages,
   each next one from the group with the fewest in flight (those this receive hands
   out counted), then the lesser processing time, then the older message. It finds
   them through an index of each group's messages in queue order, so a quiet
   message behind a noisy group's backlog is found without walking the backlog.

Everything else is moto's: visibility, receive counts, redrive to the DLQ (a message
due for it moves when the receive reaches it), long polls. A group is judged afresh
at every receive, from what it holds now and its recent processing time; the
5-minute rule has no counterpart here (a group that stops sending leaves the ledger
as its time decays). The cost: one pass over the in-flight messages per receive, and
while a group is noisy, a copy of each group's list of messages (measured in
``switchyard_local.moto_sqs`` and ``docs/emulator.md``).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# AWS's documented thresholds.
CONCURRENCY_SHARE = 0.10
CONCURRENCY_AT_LEAST = 30
PROCESSING_SHARE = 0.10
# "Recent" processing time: AWS does not say how recent; a minute's half-life.
HALF_LIFE_S = 60.0
_FORGET_BELOW_MS = 1.0  # a group's decayed processing time below this is dropped

_LEDGER = "_sy_fair"  # on a queue: {"at": ms, "busy": {group: ms}, "all": ms}
_TAKEN = "_sy_taken"  # on a message: when its current receive began (ms), or None
_lock = threading.Lock()  # ledger updates come from the server's threads


@dataclass(frozen=True)
class Assessment:
    """One receive's view of a standard queue's groups."""

    in_flight: dict[str, int] = field(default_factory=dict)
    processing_ms: dict[str, float] = field(default_factory=dict)
    noisy: frozenset[str] = frozenset()


def assess(queue: Any, now_ms: float) -> Assessment:
    """Each group's in-flight count and recent processing time, and which groups are
    noisy neighbours by AWS's documented rules."""
    in_flight: dict[str, int] = {}
    processing, total_ms = _recent(queue, now_ms)
    total_in_flight = 0
    for message in list(queue._pending_messages):
        group = message.group_id
        if now_ms <= message.visible_at:
            total_in_flight += 1
            if group is not None:
                in_flight[group] = in_flight.get(group, 0) + 1
        taken = message.__dict__.get(_TAKEN)
        if taken is not None:
            so_far = max(0.0, min(now_ms, message.visible_at) - taken)
            total_ms += so_far
            if group is not None:
                processing[group] = processing.get(group, 0.0) + so_far
    noisy = frozenset(
        group
        for group in in_flight.keys() | processing.keys()
        if (
            in_flight.get(group, 0) >= CONCURRENCY_AT_LEAST
            and in_flight.get(group, 0) > CONCURRENCY_SHARE * total_in_flight
        )
        or (total_ms > 0 and processing.get(group, 0.0) > PROCESSING_SHARE * total_ms)
    )
    return Assessment(in_flight, processing, noisy)


def receive_order(queue: Any, now_ms: float) -> Iterator[Any] | None:
    """A standard ``queue``'s visible messages in the order a receive hands them
    out while one of its groups is a noisy neighbour; None while none is (then the
    receive walks the queue in order). Quiet messages (other groups', and those
    without a group) come first, in queue order; then the noisy groups' messages,
    next always from the group with the fewest in flight, counting those handed out
    here, then the lesser processing time, then the older message."""
    judged = assess(queue, now_ms)
    if not judged.noisy:
        return None
    return _fair(_buckets(queue), judged, now_ms)


def _fair(buckets: dict[str | None, list[Any]], judged: Assessment, now_ms: float) -> Iterator[Any]:
    quiet = [_ready(b, now_ms) for key, b in buckets.items() if key not in judged.noisy]
    yield from heapq.merge(*quiet, key=_position)
    # (in flight, processing time, queue position of its next message, group, the rest)
    turns = []
    for group in judged.noisy & buckets.keys():
        rest = _ready(buckets[group], now_ms)
        head = next(rest, None)
        if head is not None:
            in_flight = judged.in_flight.get(group, 0)
            busy = judged.processing_ms.get(group, 0.0)
            turns.append((in_flight, busy, _position(head), group, head, rest))
    heapq.heapify(turns)
    while turns:
        in_flight, busy, _, group, head, rest = heapq.heappop(turns)
        yield head
        head = next(rest, None)
        if head is not None:
            heapq.heappush(turns, (in_flight + 1, busy, _position(head), group, head, rest))


def _ready(messages: list[Any], now_ms: float) -> Iterator[Any]:
    """As moto's ``Queue.messages``: visible and not delayed, in queue order."""
    for message in messages:
        if now_ms > message.visible_at and not now_ms < message.delayed_until:
            yield message


# -- each group's messages, in queue order -----------------------------------------------
# Built on a standard queue's first receive with a noisy group, then kept as messages
# come and go; moto's own removals (the fallback delete, a purge) drop it, and a count
# that no longer matches the queue's has it built again.

_BUCKETS = "_sy_groups"  # on a queue: {"groups": {group: [message]}, "count": n, "next": n}
_POSITION = "_sy_position"  # on a message: its place in its queue's order


def _position(message: Any) -> int:
    return int(message.__dict__[_POSITION])


def _buckets(queue: Any) -> dict[str | None, list[Any]]:
    """A copy of ``queue``'s messages, by group (None: those without one)."""
    with queue._messages_lock:
        book = queue.__dict__.get(_BUCKETS)
        if book is None or book["count"] != len(queue._messages):
            book = {"groups": {}, "count": 0, "next": 0}
            for message in queue._messages:
                _file(book, message)
            queue.__dict__[_BUCKETS] = book
        return {group: list(messages) for group, messages in book["groups"].items()}


def _file(book: dict[str, Any], message: Any) -> None:
    message.__dict__[_POSITION] = book["next"]
    book["next"] += 1
    book["count"] += 1
    book["groups"].setdefault(message.group_id, []).append(message)


def added(queue: Any, message: Any) -> None:
    """``message`` was appended to ``queue`` (call with its lock held)."""
    book = queue.__dict__.get(_BUCKETS)
    if book is not None:
        _file(book, message)


def removed(queue: Any, message: Any) -> None:
    """``message`` left ``queue`` (deleted, or moved to the DLQ)."""
    with queue._messages_lock:
        book = queue.__dict__.get(_BUCKETS)
        if book is None:
            return
        bucket = book["groups"].get(message.group_id, [])
        try:
            bucket.remove(message)
        except ValueError:
            return  # not filed: the count tells, and the next use builds it again
        book["count"] -= 1
        if not bucket:
            del book["groups"][message.group_id]


def reset(queue: Any) -> None:
    """moto changed ``queue``'s list by itself: build the groups again on next use."""
    queue.__dict__.pop(_BUCKETS, None)


# -- the ledger of processing time -------------------------------------------------------


def received(queue: Any | None, message: Any, now_ms: float) -> None:
    """``message`` is being received (before moto marks it): its receive before this
    one, if any, ends here."""
    if queue is not None:
        settled(queue, message, now_ms)
    message.__dict__[_TAKEN] = now_ms


def settled(queue: Any, message: Any, now_ms: float) -> None:
    """``message``'s current receive in ``queue`` ends (deleted, received again, moved
    to the DLQ): its time in flight goes to its group's processing time."""
    taken = message.__dict__.get(_TAKEN)
    if taken is None:
        return
    message.__dict__[_TAKEN] = None
    spent = min(now_ms, message.visible_at) - taken
    if spent <= 0:
        return
    with _lock:
        ledger = _decayed(queue, now_ms)
        group = message.group_id
        if group is not None:
            ledger["busy"][group] = ledger["busy"].get(group, 0.0) + spent
        ledger["all"] += spent


def _recent(queue: Any, now_ms: float) -> tuple[dict[str, float], float]:
    """The recent processing time of ``queue``'s receives that have ended: each
    group's, and the queue's in all (messages without a group included)."""
    with _lock:
        ledger = _decayed(queue, now_ms)
        return dict(ledger["busy"]), float(ledger["all"])


def _decayed(queue: Any, now_ms: float) -> dict[str, Any]:
    """``queue``'s ledger, its times halved for every ``HALF_LIFE_S`` since it was last
    brought up to date (call with ``_lock`` held)."""
    ledger = queue.__dict__.get(_LEDGER)
    if ledger is None:
        ledger = queue.__dict__[_LEDGER] = {"at": now_ms, "busy": {}, "all": 0.0}
        return ledger
    elapsed = now_ms - ledger["at"]
    if elapsed > 0:
        keep = 0.5 ** (elapsed / (HALF_LIFE_S * 1000))
        ledger["busy"] = {
            group: kept
            for group, spent in ledger["busy"].items()
            if (kept := spent * keep) >= _FORGET_BELOW_MS
        }
        ledger["all"] *= keep
        ledger["at"] = now_ms
    return ledger
