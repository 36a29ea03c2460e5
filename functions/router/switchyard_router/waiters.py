"""Every sync request this router process waits for, its looks read together.

A sync request waits for its result in ``PredictService.wait``, which looks for it
when ``LookSchedule`` says. Each look is a read of the results table; read one by
one, n callers cost n reads a round of looks, and each read is CPU in the router.
So a request's looks go through the process's :class:`ResultWaiters`: the request
says when its next look falls due, sleeps until then and asks; one thread reads the
looks asked for with one ``ResultStore.get_many`` (a BatchGetItem), and each request
goes on with its record as before (answered, or its fallback, or its hand-off).

Looks are read together when they fall due together: once one is asked for, the
read waits for the requests whose looks are due within ``together_s`` of it, and no
longer. No look is read before its time, so a request takes no more looks than its
schedule gives it. In Lambda a function instance serves one request at a time: no
other look is due, and each look is read at once, one key by its GetItem, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from switchyard.results import ResultStore
from switchyard.schemas import ResultRecord

# Looks due within this of the first asked for are read with it.
TOGETHER_S = 0.005


class Waiter:
    """One request waiting in :class:`ResultWaiters`: when its next look is due, and
    what the read of its look found."""

    def __init__(self, tenant: str, request_id: str) -> None:
        self.key = (tenant, request_id)
        self.due: float | None = None  # monotonic: its next look, while it sleeps to it
        self.asked_at: float | None = None  # its look is waiting for the next read
        self.record: ResultRecord | None = None
        self.failed: Exception | None = None
        self.read = threading.Event()


class ResultWaiters:
    """The looks of every request this process waits for, read by one thread: a
    request's look, asked for with :meth:`look`, is read with those due with it.
    ``sleep`` is how a request waits for its look's time."""

    def __init__(
        self,
        results: ResultStore,
        sleep: Callable[[float], None] = time.sleep,
        together_s: float = TOGETHER_S,
    ) -> None:
        self._results = results
        self._sleep = sleep
        self._together = together_s
        self._waiting: dict[int, Waiter] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def join(self, tenant: str, request_id: str) -> Waiter:
        """A request begins to wait (and must :meth:`leave` when it ends)."""
        waiter = Waiter(tenant, request_id)
        with self._changed:
            self._waiting[id(waiter)] = waiter
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="result-waiters", daemon=True
                )
                self._thread.start()
        return waiter

    def leave(self, waiter: Waiter) -> None:
        """A request's wait ended (after its last look: no read waits for it)."""
        with self._changed:
            self._waiting.pop(id(waiter), None)

    def look(self, waiter: Waiter, after_s: float) -> ResultRecord | None:
        """The waiter's record (None if it has none yet), read ``after_s`` seconds
        from now with the other looks due then."""
        with self._changed:
            waiter.due = time.monotonic() + after_s
        if after_s > 0:
            self._sleep(after_s)
        waiter.read.clear()
        with self._changed:
            waiter.due = None
            waiter.asked_at = time.monotonic()
            self._changed.notify()
        waiter.read.wait()
        if waiter.failed is not None:
            raise waiter.failed
        return waiter.record

    def _run(self) -> None:
        while True:
            asked = self._next_looks()
            failed: Exception | None = None
            try:
                found = self._read([w.key for w in asked])
            except Exception as exc:  # noqa: BLE001 - each wait raises it, as its own read would
                found, failed = {}, exc
            for waiter in asked:
                waiter.record = found.get(waiter.key)
                waiter.failed = failed
                waiter.read.set()

    def _read(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], ResultRecord]:
        """The records of these looks: several in one BatchGetItem, one alone by its
        GetItem (as in Lambda, whose router role reads single items)."""
        if len(keys) > 1:
            return self._results.get_many(keys)
        ((tenant, request_id),) = keys
        record = self._results.get(tenant, request_id)
        return {keys[0]: record} if record is not None else {}

    def _next_looks(self) -> list[Waiter]:
        """The looks of the next read, once they are due: every look asked for, when
        no other falls due within ``together_s`` of the first of them (or that long
        has passed)."""
        with self._changed:
            while True:
                asked = [w for w in self._waiting.values() if w.asked_at is not None]
                if not asked:
                    self._changed.wait()
                    continue
                until = min(w.asked_at or 0.0 for w in asked) + self._together
                coming = any(w.due is not None and w.due <= until for w in self._waiting.values())
                now = time.monotonic()
                if coming and now < until:
                    self._changed.wait(until - now)  # each look asked for wakes it
                    continue
                for waiter in asked:
                    waiter.asked_at = None
                return asked
