"""What the worker's pipeline stages run on, beside the model.

The model is the scarce resource: while it computes one batch, the results of the
batch before are stored and its messages deleted on another thread
(:class:`InOrder`, the finisher's), and metrics are printed on one of their own
(:class:`MetricsEmitter`), so the model does not wait for the store, the log or SQS.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from aws_lambda_powertools import Logger

from switchyard.telemetry import COUNT, MILLISECONDS, emit_metrics

# The worker's one logger, shared by its stages.
log = Logger(service="switchyard-worker")

T = TypeVar("T")
_STOP = object()
_PAUSE_SLICE_S = 0.02  # how soon a pause notices a stop


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
    """A model's metrics per version (EMF), printed on a thread of their own, off the
    model's critical path."""

    def __init__(self, model: str, enabled: bool = True) -> None:
        self._model = model
        self._enabled = enabled
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")

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
        values = {}
        if batch_size is not None:
            values["BatchSize"] = (COUNT, float(batch_size))
        if compute_ms is not None:
            values["Compute"] = (MILLISECONDS, compute_ms)
        if queue_wait_ms is not None:
            values["QueueWait"] = (MILLISECONDS, queue_wait_ms)
        if item_errors:
            values["ItemErrors"] = (COUNT, float(item_errors))
        if values:
            self._pool.submit(emit_metrics, values, model=self._model, version=version)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
