"""Pipeline stages of the worker that run beside the model.

The model is the scarce resource: while it computes one batch, the results of the
batch before are stored and its messages deleted on another thread
(:class:`InOrder`), so the model does not wait for the store, the log or SQS.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_STOP = object()


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
