"""The messages a worker holds, from their receipt until they are deleted or released.

Every stage hands messages back through here: the finisher deletes them once their
results are stored, a failed batch releases them for retry, a stopping worker
releases what it did not start. Meanwhile the heartbeat keeps each one invisible to
other workers (``set_visibility`` before its timeout runs out), so a long wait for a
batch or a long batch does not let another worker take it too.
"""

from __future__ import annotations

import threading

from switchyard.queues import Received, WorkQueue
from switchyard_worker.stages import log


class MessagesInHand:
    """The worker's messages in hand, by receipt handle, and the lanes they came from."""

    def __init__(self, lanes: tuple[WorkQueue, WorkQueue], visibility: int) -> None:
        self.lanes = lanes
        # Seconds a held message stays invisible; a generative model's worker holds
        # its messages for less (its loop, ``GenerationLoop``, sets it).
        self.visibility = visibility
        self._held: dict[str, Received] = {}
        self._lock = threading.Lock()

    def hold(self, received: list[Received]) -> None:
        with self._lock:
            for r in received:
                self._held[r.receipt_handle] = r

    def held(self) -> list[Received]:
        with self._lock:
            return list(self._held.values())

    def delete(self, messages: list[Received]) -> None:
        for queue, mine in self._by_lane(messages):
            queue.delete(mine)
        self.forget(messages)

    def release(self, messages: list[Received], seconds: int) -> None:
        """Visible again after ``seconds`` (0: at once), to this worker or another."""
        for queue, mine in self._by_lane(messages):
            queue.set_visibility(mine, seconds)
        self.forget(messages)

    def forget(self, messages: list[Received]) -> None:
        """No longer held (deleted, released, or left to come back on their own)."""
        with self._lock:
            for r in messages:
                self._held.pop(r.receipt_handle, None)

    def heartbeat(self, stopping: threading.Event) -> None:
        """Extend every held message before its visibility runs out, until stopped."""
        interval = max(self.visibility / 3, 1)
        while not stopping.wait(interval):
            self.beat()

    def beat(self) -> None:
        """Extend every held message's visibility once."""
        for queue, mine in self._by_lane(self.held()):
            try:
                queue.set_visibility(mine, self.visibility)
            except Exception:  # noqa: BLE001 - retried on the next beat
                log.exception("visibility extension failed")

    def _by_lane(self, messages: list[Received]) -> list[tuple[WorkQueue, list[Received]]]:
        """The messages grouped by the queue they came from (lanes with none left out)."""
        groups = [(q, [r for r in messages if r.lane == q.lane]) for q in self.lanes]
        return [(q, mine) for q, mine in groups if mine]
