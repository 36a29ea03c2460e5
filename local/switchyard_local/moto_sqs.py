"""SQS in the local emulator, able to hold a production-size backlog.

moto 5.2.5 keeps a queue's messages in one list and, on every call, walks all of it
more than once: a receive builds the list of every visible message and then, for
each message it hands out, rebuilds the queue's attribute dictionary twice (three
full counts each) to read the retention period; a send rebuilds that dictionary to
read one FIFO flag; a delete and a change of visibility scan every message for the
receipt handle and rebuild the list; GetQueueAttributes rebuilds the dictionary
once per name asked for. With 1,000 messages queued one receive + delete costs about
1.5 s; with 10,000, about 16 s. And every message object stays referenced for the
life of the process (moto's instance tracker, for its dashboard).

:func:`apply` changes only how those paths find things, where the local platform
starts the emulator (``switchyard_local.emulator``):

- a receive walks the visible messages lazily and stops once it has what was asked
  for; the retention check reads the queue's retention period directly;
- a send, a receive and a delete never count the whole queue (the counts they would
  compute are never read on those paths);
- messages are indexed by id and by every receipt handle they were given, so a
  delete or a change of visibility finds its message at once. A handle the index
  does not know (never issued, already deleted, a message moved to the DLQ) goes to
  moto's own code, so errors and edge cases answer exactly as before;
- the three approximate counts are made in one pass, once per GetQueueAttributes;
- SQS messages are no longer tracked for moto's dashboard, so a deleted message's
  memory is freed.

FIFO queues keep moto's behaviour (their deduplication scan is left as it is). The
fix reaches into moto's internals, so it refuses any moto but the pinned one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

PINNED_MOTO = "5.2.5"
_COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)
_state = threading.local()  # .quiet: inside a send/receive/delete, counts are not read
_originals: dict[str, Any] = {}


class UnsupportedMoto(RuntimeError):
    pass


def apply() -> None:
    """Patch moto's SQS backend in this process (idempotent)."""
    if _originals:
        return
    from importlib import metadata

    version = metadata.version("moto")
    if version != PINNED_MOTO:
        raise UnsupportedMoto(
            f"switchyard_local.moto_sqs fixes moto {PINNED_MOTO}'s SQS internals; "
            f"moto {version} is installed (requirements.txt pins it)"
        )
    from moto.sqs import models

    queue, backend, message = models.Queue, models.SQSBackend, models.Message
    _originals.update(
        messages=queue.messages,
        attributes=queue.attributes,
        add_message=queue.add_message,
        queue_delete=queue.delete_message,
        counts=[getattr(queue, _snake(n)) for n in _COUNTS],
        send_message=backend.send_message,
        receive_message=backend.receive_message,
        delete_message=backend.delete_message,
        change_visibility=backend.change_message_visibility,
        get_queue_attributes=backend.get_queue_attributes,
        retention=backend.is_message_valid_based_on_retention_period,
        purge=backend.purge_queue,
        message_new=message.__dict__.get("__new__"),
    )
    queue.messages = property(_visible_messages)
    queue.attributes = property(_attributes)
    queue.add_message = _add_message
    queue.delete_message = _queue_delete_message
    for index, name in enumerate(_COUNTS):
        setattr(queue, _snake(name), property(_count_getter(index)))
    backend.send_message = _quiet(_originals["send_message"])
    backend.receive_message = _receive_message
    backend.delete_message = _quiet(_originals["delete_message"])
    backend.change_message_visibility = _change_message_visibility
    backend.get_queue_attributes = _get_queue_attributes
    backend.is_message_valid_based_on_retention_period = _within_retention
    backend.purge_queue = _purge_queue
    message.__new__ = staticmethod(_untracked_new)  # type: ignore[method-assign]


def undo() -> None:
    """Put moto's own code back (for tests that compare the two)."""
    if not _originals:
        return
    from moto.sqs import models

    queue, backend, message = models.Queue, models.SQSBackend, models.Message
    queue.messages = _originals["messages"]
    queue.attributes = _originals["attributes"]
    queue.add_message = _originals["add_message"]
    queue.delete_message = _originals["queue_delete"]
    for name, original in zip(_COUNTS, _originals["counts"], strict=True):
        setattr(queue, _snake(name), original)
    backend.send_message = _originals["send_message"]
    backend.receive_message = _originals["receive_message"]
    backend.delete_message = _originals["delete_message"]
    backend.change_message_visibility = _originals["change_visibility"]
    backend.get_queue_attributes = _originals["get_queue_attributes"]
    backend.is_message_valid_based_on_retention_period = _originals["retention"]
    backend.purge_queue = _originals["purge"]
    if _originals["message_new"] is None:
        del message.__new__
    else:
        message.__new__ = _originals["message_new"]
    _originals.clear()


def _snake(name: str) -> str:
    from moto.core.utils import camelcase_to_underscores

    return str(camelcase_to_underscores(name))


def _now_ms() -> float:
    from moto.core.utils import unix_time_millis

    return float(unix_time_millis())


# -- visible messages, lazily --------------------------------------------------------


class _VisibleMessages:
    """The queue's visible, undelayed messages in queue order, found as they are
    walked (a receive stops after the count it wants)."""

    def __init__(self, messages: list[Any]) -> None:
        self._messages = messages

    def __iter__(self) -> Iterator[Any]:
        now = _now_ms()
        for message in self._messages:
            if now > message.visible_at and not now < message.delayed_until:
                yield message

    def __bool__(self) -> bool:
        return next(iter(self), None) is not None

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _visible_messages(self: Any) -> _VisibleMessages:
    return _VisibleMessages(self._messages)


# -- counts: one pass, and none where nobody reads them ---------------------------


def _counts(queue: Any) -> tuple[int, int, int]:
    """(visible, not visible, delayed), as moto defines each, in one pass."""
    now = _now_ms()
    visible = invisible = delayed = 0
    for message in queue._messages:
        is_delayed = now < message.delayed_until
        if now > message.visible_at:
            visible += not is_delayed
        else:
            invisible += 1
        delayed += is_delayed
    return visible, invisible, delayed


def _count_getter(index: int) -> Callable[[Any], int | None]:
    def get(self: Any) -> int | None:
        cached = getattr(_state, "counts", None)
        if cached is not None and cached[0] is self:
            return cached[1][index] if cached[1] is not None else None
        return _counts(self)[index]

    return get


def _attributes(self: Any) -> dict[str, Any]:
    """moto's attribute dictionary, its three counts made in one pass (or, inside a
    send, receive or delete, which never read them, not made at all)."""
    quiet = getattr(_state, "quiet", False)
    previous = getattr(_state, "counts", None)
    _state.counts = (self, None if quiet else _counts(self))
    try:
        result = dict(_originals["attributes"].fget(self))
    finally:
        _state.counts = previous
    if quiet:
        for name in _COUNTS:
            result.pop(name, None)
    return result


def _quiet(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with the queue's counts left out of any attribute dictionary it
    builds for its own use."""

    def run(*args: Any, **kwargs: Any) -> Any:
        previous = getattr(_state, "quiet", False)
        _state.quiet = True
        try:
            return method(*args, **kwargs)
        finally:
            _state.quiet = previous

    run.__name__ = method.__name__
    run.__doc__ = method.__doc__
    return run


def _within_retention(self: Any, queue_name: str, message: Any) -> bool:
    from moto.core.utils import unix_time

    queue = self.get_queue(queue_name)
    retain_until = int(queue.message_retention_period) + message.sent_timestamp / 1000
    return bool(retain_until > unix_time())


def _get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> Any:
    """moto's GetQueueAttributes, with the attribute dictionary built once."""
    from moto.sqs.exceptions import InvalidAttributeName

    queue = self.get_queue(queue_name)
    if not attribute_names:
        return {}
    valid = ["All", *queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES]
    invalid = next((name for name in attribute_names if name not in valid), None)
    if invalid or invalid == "":
        raise InvalidAttributeName(invalid)
    attributes = queue.attributes
    if "All" in attribute_names:
        return attributes
    return {n: attributes[n] for n in attribute_names if attributes.get(n) is not None}


# -- index by id and receipt handle ---------------------------------------------------


def _index(queue: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(message id -> message, receipt handle -> message) of ``queue``."""
    if "_sy_by_id" not in queue.__dict__:
        queue._sy_by_id = {m.id: m for m in queue._messages}
        queue._sy_by_handle = {h: m for m in queue._messages for h in m.all_receipt_handles}
    return queue._sy_by_id, queue._sy_by_handle


def _add_message(self: Any, message: Any) -> None:
    _originals["add_message"](self, message)
    if self._messages and self._messages[-1] is message:  # not dropped as a FIFO duplicate
        message._sy_owner = self.queue_arn  # a string: moto deep-copies messages
        _index(self)[0][message.id] = message


def _receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> list[Any]:
    """moto's receive (with the lazy walk); each message's new receipt handle is
    indexed. moto hands back copies, so the copy's id finds the queue's message."""
    received = _quiet(_originals["receive_message"])(self, queue_name, *args, **kwargs)
    queue = self.get_queue(queue_name)
    by_id, by_handle = _index(queue)
    for copy in received:
        message = by_id.get(copy.id)
        if message is not None and copy.receipt_handle:
            by_handle[copy.receipt_handle] = message
    return received


def _purge_queue(self: Any, queue_name: str) -> None:
    """moto's purge, which empties the queue's list: the index goes with it."""
    _originals["purge"](self, queue_name)
    queue = self.get_queue(queue_name)
    queue.__dict__.pop("_sy_by_id", None)
    queue.__dict__.pop("_sy_by_handle", None)


def _owned(queue: Any, receipt_handle: str) -> Any | None:
    """The message of ``queue`` that was given ``receipt_handle``, if the index knows
    it and the message is still in this queue."""
    message = _index(queue)[1].get(receipt_handle)
    if message is None or message.__dict__.get("_sy_owner") != queue.queue_arn:
        return None
    return message


def _queue_delete_message(self: Any, receipt_handle: str) -> None:
    if receipt_handle in self.deleted_messages:
        return  # deleting twice is fine, as in moto
    message = _owned(self, receipt_handle)
    if message is None:
        _originals["queue_delete"](self, receipt_handle)  # moto's answer, errors included
        return
    try:
        self._messages.remove(message)
    except ValueError:  # no longer in the list (purged): moto's own answer
        _originals["queue_delete"](self, receipt_handle)
        return
    self.pending_messages.discard(message)
    handles = message.all_receipt_handles
    self.deleted_messages.update(handles)
    by_id, by_handle = _index(self)
    by_id.pop(message.id, None)
    for handle in handles:
        by_handle.pop(handle, None)
    message._sy_owner = None


def _change_message_visibility(
    self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
) -> None:
    queue = self.get_queue(queue_name)
    message = _owned(queue, receipt_handle)
    if message is None:
        _originals["change_visibility"](self, queue_name, receipt_handle, visibility_timeout)
        return
    from moto.sqs.exceptions import InvalidParameterValue

    if _now_ms() + int(visibility_timeout) * 1000 - message.sent_timestamp > 43200 * 1000:
        raise InvalidParameterValue(
            f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: "
            "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        )
    message.change_visibility(visibility_timeout)
    if message.visible and message in queue.pending_messages:
        queue.pending_messages.remove(message)


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)
