"""What the worker's pipeline stages run on, beside the model.

The model is the scarce resource: while it computes one batch, the results of the
batch before are stored and its messages deleted on another thread
(:class:`InOrder`, the finisher's), and metrics are gathered and printed once a
second on one of their own (:class:`MetricsEmitter`), so the model does not wait
for the store, the log or SQS.
"""

from __future__ import annotations

import gc
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from pydantic_core import to_json

from switchyard.telemetry import COUNT, MILLISECONDS, MetricValues, emit_metrics


def _log_json(line: dict[str, Any]) -> str:
    """A log line's JSON, by pydantic-core: a batch's line names each of its results,
    and the standard library's encoder took twice as long over them."""
    return to_json(line, fallback=str).decode()


def _log_message(text: str) -> str:
    """A log line's message as it was given: the worker's are phrases, never JSON
    text, and the formatter's attempt to read each as JSON cost an exception a line
    (3 of a "results stored" line's 23 µs)."""
    return text


# The worker's one logger, shared by its stages.
log = Logger(service="switchyard-worker", json_serializer=_log_json, json_deserializer=_log_message)


class _At:
    """When a line is written, as the formatter's ``formatTime`` reads a record's."""

    __slots__ = ("created", "msecs")

    def __init__(self, now: float) -> None:
        self.created = now
        self.msecs = (now - int(now)) * 1000


def log_batch(message: str, fields: dict[str, Any]) -> None:
    """A batch's INFO line (the finisher's ``results stored``), written straight to
    the worker's log handler: the line :data:`log` writes for ``log.info(message,
    extra=fields)``, key for key in its order, its timestamp as its formatter writes
    one, its location this function's caller. The logging framework's record,
    caller lookup, handler calls and formatter are left out: in the running worker
    (digits-cnn, the loop alone, batches of 64) they cost 2.5 to 3 µs of CPU an
    input, 10 % of the worker's, and this line costs a tenth of that. What is left
    out with them: other handlers (a line goes to the worker's own, stdout, only),
    keys appended to the logger (the worker appends none) and the X-Ray trace id (a
    Lambda function's; a worker has none)."""
    if not log.isEnabledFor(logging.INFO):
        return
    handler = log.registered_handler
    formatter = log.registered_formatter
    caller = sys._getframe(1)
    values = {
        "levelname": "INFO",
        "funcName": caller.f_code.co_name,
        "lineno": caller.f_lineno,
        "asctime": formatter.formatTime(_At(time.time())),  # type: ignore[arg-type]
    }
    line: dict[str, Any] = {}
    for key, value in formatter.log_format.items():
        if key == "message":
            line[key] = message
        elif isinstance(value, str):
            line[key] = value % values if "%(" in value else value
        elif value is not None:
            line[key] = value
    line.update(fields)
    text = _log_json(line) + "\n"
    handler.acquire()
    try:
        stream = handler.stream  # type: ignore[attr-defined]
        stream.write(text)
        stream.flush()
    finally:
        handler.release()

T = TypeVar("T")
_STOP = object()
_PAUSE_SLICE_S = 0.02  # how soon a pause notices a stop


# Container objects made (less those freed) before a young collection runs; Python's
# default is 700.
YOUNG_COLLECTION_AFTER = 10_000


def collect_less() -> tuple[int, int, int]:
    """Run the cyclic collector's young collections less often, for a worker's life
    after its start (``switchyard.init_phase``). A light model's worker makes some
    tens of containers per request (decoded inputs, records, log lines) and frees
    nearly all of them by reference count; at Python's default a young collection
    ran every few dozen requests, and each older one it led to traversed what the
    worker holds. The young generation stays a few MiB at most. The thresholds it
    replaced, for ``gc.set_threshold`` to put back."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *before[1:])
    return before


def pause(stopping: threading.Event, seconds: float) -> None:
    """Sleep in short slices, waking early once a stop is asked for."""
    end = time.monotonic() + seconds
    while not stopping.is_set() and (left := end - time.monotonic()) > 0:
        time.sleep(min(left, _PAUSE_SLICE_S))


class InOrder(Generic[T]):
    """Runs ``handle`` on each submitted item on one thread, in submission order.

    At most ``depth`` items wait: ``submit`` blocks beyond that, so a slow store
    slows the worker down instead of growing its memory. ``handle`` must not raise
    (it is its own error handler); ``flush`` waits until every item is handled.
    """

    def __init__(self, handle: Callable[[T], None], name: str, depth: int = 2) -> None:
        self._handle = handle
        self._items: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> None:
        self._items.put(item)

    def flush(self) -> None:
        self._items.join()

    def close(self) -> None:
        """Handle what was submitted, then stop the thread."""
        self._items.put(_STOP)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            item = self._items.get()
            try:
                if item is _STOP:
                    return
                self._handle(item)  # type: ignore[arg-type]
            finally:
                self._items.task_done()


class MetricsEmitter:
    """A model's metrics per version (EMF), off the model's critical path: a batch's
    values are added to what its version has gathered, and a thread of their own
    prints what was gathered once every ``interval_s`` (one document per version,
    each value a sample of its own), and on ``close``.

    Handing each batch's values to another thread cost the model's thread a wake-up
    of that thread per batch (digits-cnn, ~200 batches a second: a sixth of the
    interpreter time the model's thread held went to it); gathered, it costs a lock
    and an append, and CloudWatch receives one document a second per version rather
    than one per batch. A value is printed at most ``interval_s`` after its batch."""

    def __init__(self, model: str, enabled: bool = True, interval_s: float = 1.0) -> None:
        self._model = model
        self._enabled = enabled
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._gathered: dict[str, MetricValues] = {}  # version -> name -> (unit, values)
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._loop, name="metrics", daemon=True)
            self._thread.start()

    def emit(
        self,
        version: str,
        *,
        batch_size: int | None = None,
        compute_ms: float | None = None,
        queue_wait_ms: float | None = None,
        item_errors: int = 0,
    ) -> None:
        if not self._enabled:
            return
        values: list[tuple[str, MetricUnit, float]] = []
        if batch_size is not None:
            values.append(("BatchSize", COUNT, float(batch_size)))
        if compute_ms is not None:
            values.append(("Compute", MILLISECONDS, compute_ms))
        if queue_wait_ms is not None:
            values.append(("QueueWait", MILLISECONDS, queue_wait_ms))
        if item_errors:
            values.append(("ItemErrors", COUNT, float(item_errors)))
        with self._lock:
            gathered = self._gathered.setdefault(version, {})
            for name, unit, value in values:
                _, samples = gathered.setdefault(name, (unit, []))
                samples.append(value)  # type: ignore[union-attr]

    def flush(self) -> None:
        """Print what has been gathered now."""
        with self._lock:
            gathered, self._gathered = self._gathered, {}
        for version, values in gathered.items():
            try:
                emit_metrics(values, model=self._model, version=version)
            except Exception:  # noqa: BLE001 - a metric is never worth the worker
                log.exception("metrics not printed", extra={"version": version})

    def close(self) -> None:
        """Print what is left, then stop the thread."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _loop(self) -> None:
        while not self._closing.wait(self._interval_s):
            self.flush()
