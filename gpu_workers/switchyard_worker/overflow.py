"""A CPU pool's gates over the models it takes on overflow, and a GPU pool's word
that its workers are running (the rule is ``switchyard.overflow``'s).

:class:`OverflowGates` answers, for each model a CPU pool's worker takes on
overflow, whether its intake may receive now. It reads how many workers of each
GPU pool are running every :data:`RUNNING_READ_SECONDS` and the age of the models'
oldest messages every ``age_read_seconds`` (a setting: CloudWatch's metric moves
once a minute in AWS), each read shared by every intake that asks, and logs each
gate's opening and shutting with the reason. A read that fails leaves the gates as
they were.

:class:`Heartbeat` is a running GPU pool worker's side: it says so every
``switchyard.overflow.BEAT_SECONDS`` from a thread of its own, from when the worker
is ready until it stops, and takes its word back as it stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from switchyard.overflow import BEAT_SECONDS, OverflowSource, PoolBeats, overflow_open
from switchyard_worker.stages import log

RUNNING_READ_SECONDS = 1.0  # how often the GPU pools' running workers are read


class OverflowGates:
    """Whether a CPU pool's worker takes each overflow model's work now."""

    def __init__(
        self,
        sources: Mapping[str, OverflowSource],
        *,
        queue_names: Mapping[str, Iterable[str]],
        running: Callable[[str], int],
        ages: Callable[[list[str]], Mapping[str, float]],
        age_read_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sources = dict(sources)
        self._queues = {model: list(queue_names[model]) for model in self._sources}
        self._running_of = running
        self._ages_of = ages
        self._age_every = age_read_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._ages: dict[str, float] = {}
        self._read_running = self._read_ages = -float("inf")
        self._open: dict[str, bool] = {}

    @property
    def models(self) -> frozenset[str]:
        """The models it keeps a gate for."""
        return frozenset(self._sources)

    def is_open(self, model: str) -> bool:
        """Whether ``model``'s intake may receive now (the module's docstring)."""
        with self._lock:
            self._refresh()
            source = self._sources[model]
            running = self._running.get(source.pool, 0)
            age = max((self._ages.get(q, 0.0) for q in self._queues[model]), default=0.0)
            now_open = overflow_open(
                running_workers=running, oldest_age_seconds=age, after_ms=source.after_ms
            )
            if self._open.get(model) != now_open:
                self._open[model] = now_open
                log.info(
                    "overflow open" if now_open else "overflow shut",
                    extra={
                        "model": model,
                        "from_pool": source.pool,
                        "running_workers": running,
                        "oldest_age_seconds": round(age, 3),
                        "after_ms": source.after_ms,
                    },
                )
            return now_open

    def gate(self, model: str) -> Callable[[], bool]:
        """The intake's question for ``model``."""
        return lambda: self.is_open(model)

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._read_running >= RUNNING_READ_SECONDS:
            self._read_running = now
            try:
                self._running = {
                    pool: self._running_of(pool)
                    for pool in {s.pool for s in self._sources.values()}
                }
            except Exception:  # noqa: BLE001 - the gates stay as they were
                log.exception("overflow: running workers not read")
        if now - self._read_ages >= self._age_every:
            self._read_ages = now
            try:
                names = [q for queues in self._queues.values() for q in queues]
                self._ages = dict(self._ages_of(names))
            except Exception:  # noqa: BLE001 - the gates stay as they were
                log.exception("overflow: queue ages not read")


class Heartbeat:
    """A running worker of a pool that overflows, saying so (the module's docstring)."""

    def __init__(self, beats: PoolBeats, pool: str, worker_id: str) -> None:
        self._beats = beats
        self._pool = pool
        self._worker_id = worker_id
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._say()
        self._thread = threading.Thread(target=self._run, name="pool-beat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._beats.end(self._pool, self._worker_id)
        except Exception:  # noqa: BLE001 - the beat goes stale by itself
            log.exception("pool beat not taken back", extra={"pool": self._pool})

    def _run(self) -> None:
        while not self._stopping.wait(BEAT_SECONDS):
            self._say()

    def _say(self) -> None:
        try:
            self._beats.beat(self._pool, self._worker_id)
        except Exception:  # noqa: BLE001 - the next beat tries again
            log.exception("pool beat not written", extra={"pool": self._pool})
