"""A pool worker's loaded model versions: an LRU cache within a memory budget.

A pool's worker serves many models and holds only what its budget allows. A version
is loaded on first use, on a loader thread of its own (:meth:`ModelCache.request`),
so a load never holds up the batches of the versions already loaded, and its
footprint is measured as it loads (:class:`ProcessMeter`): the process's resident
memory before and after, never less than the bytes of the tensors it holds, and on a
GPU the device memory torch allocated. Loaded versions are kept in the order they
were last used; making room evicts the least recently used one that no batch is
running on (a running batch pins its version). A canary and its stable version are
two entries.

The rule the budget keeps: the footprints of the resident versions, as measured,
never add up to more than the budget. A version joins them only once the others fit
beside it, the least recently used evicted first. Memory really held may run over
while a version loads for the first time, as its footprint is known only then; a
version loaded before makes room for its last footprint before it loads again. A
version whose footprint alone is over the budget is refused (:class:`VersionTooLarge`),
and its requests are answered so rather than retried.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from switchyard.registry import ModelVersion
from switchyard_worker.runtimes import ModelRuntime
from switchyard_worker.stages import log

Key = tuple[str, str]  # (model, version)
EventKind = Literal["load", "evict", "refuse", "fail"]
_MIB = 1 << 20
# Load and eviction events kept for the state's readers (rates and load percentiles
# over the last minutes).
RECENT_EVENTS = 500


class VersionTooLarge(RuntimeError):
    """A version whose footprint alone is over the budget: it is never loaded."""


class NoRoom(RuntimeError):
    """A version could not be loaded now: the versions in the way are running."""


@dataclass(frozen=True)
class Footprint:
    """Memory, MiB: the host's (resident) and the device's (GPU)."""

    host_mib: float = 0.0
    device_mib: float = 0.0

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(self.host_mib + other.host_mib, self.device_mib + other.device_mib)


class Meter(Protocol):
    """How a load's footprint is measured."""

    def sample(self) -> Footprint:
        """The process's memory now."""
        ...

    def floor(self, runtime: ModelRuntime) -> Footprint:
        """What ``runtime`` holds at least (its weights' bytes), whatever the samples say."""
        ...

    def release(self) -> None:
        """Give what evicted versions held back, so that the next sample no longer
        counts it."""
        ...


class ProcessMeter:
    """This process's resident memory (``/proc/self/statm``) and, where torch runs on
    a GPU, the device memory it has allocated. A sample taken while other models'
    batches run includes their passing activations: a footprint errs on the high
    side, never below the loaded weights' own bytes (``floor``: a torch module's
    tensors, an ONNX graph file's size). A load that reuses heap pages an evicted
    version left behind raises the resident memory by less than it holds; the floor
    keeps its footprint honest then."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._trim = ctypes.CDLL(None).malloc_trim  # glibc: free heap pages to the kernel
        except (OSError, AttributeError):
            self._trim = None

    def sample(self) -> Footprint:
        try:
            with open("/proc/self/statm") as statm:
                host = int(statm.read().split()[1]) * self._page / _MIB
        except (OSError, ValueError, IndexError):
            import resource

            host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return Footprint(host, _cuda_allocated_mib())

    def floor(self, runtime: ModelRuntime) -> Footprint:
        host = device = 0.0
        weights = getattr(runtime, "weights", None)  # (bytes, device): an ONNX session's
        if weights is not None:
            size, on = weights
            if on == "cuda":
                device += size / _MIB
            else:
                host += size / _MIB
        for tensor in _tensors(runtime):
            size = tensor.numel() * tensor.element_size() / _MIB
            if tensor.device.type == "cuda":
                device += size
            else:
                host += size
        return Footprint(host, device)

    def release(self) -> None:
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def _cuda_allocated_mib() -> float:
    torch = sys.modules.get("torch")  # only where a runtime imported it
    if torch is None or not torch.cuda.is_available():
        return 0.0
    return float(torch.cuda.memory_allocated()) / _MIB


def _tensors(runtime: Any) -> Iterator[Any]:
    """The parameters and buffers of the torch modules a runtime holds (its own
    attributes, one level down: ``SentenceEmbedder._model``, a TorchScript
    classifier's ``_module``). Runtimes without any (ONNX Runtime's sessions) give none."""
    seen: set[int] = set()
    for value in [runtime, *vars(runtime).values()] if hasattr(runtime, "__dict__") else [runtime]:
        parameters, buffers = getattr(value, "parameters", None), getattr(value, "buffers", None)
        if not callable(parameters) or not callable(buffers):
            continue
        with contextlib.suppress(Exception):  # not a torch module after all
            for tensor in [*parameters(), *buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    yield tensor


@dataclass
class Entry:
    """A loaded version."""

    model: str
    version: str
    runtime: ModelRuntime
    footprint: Footprint
    load_seconds: float
    loaded_at: float  # epoch
    last_used: float  # epoch
    uses: int = 0
    pins: int = 0


@dataclass(frozen=True)
class CacheEvent:
    """A load (with its time and footprint), an eviction, a refusal or a failure."""

    kind: EventKind
    model: str
    version: str
    at: float  # epoch
    load_seconds: float | None = None
    footprint: Footprint | None = None
    reason: str | None = None


@dataclass
class _Counts:
    loads: int = 0
    evictions: int = 0
    refusals: int = 0
    failures: int = 0
    loads_by_model: dict[str, int] = field(default_factory=dict)


class ModelCache:
    """Loaded versions of a pool's models, least recently used first, within the
    budgets (MiB; no device budget: the device's memory is not counted)."""

    def __init__(
        self,
        *,
        load: Callable[[ModelVersion], ModelRuntime],
        memory_budget_mib: float,
        device_memory_budget_mib: float | None = None,
        meter: Meter | None = None,
        on_event: Callable[[CacheEvent], None] | None = None,
        on_ready: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.budget = Footprint(float(memory_budget_mib), float(device_memory_budget_mib or 0))
        self._device_budget = device_memory_budget_mib is not None
        self._load_runtime = load
        self._meter = meter or ProcessMeter()
        self._on_event = on_event or (lambda _: None)
        self._on_ready = on_ready or (lambda: None)
        self._clock = clock
        self._lock = threading.Condition()
        self._entries: OrderedDict[Key, Entry] = OrderedDict()  # least recently used first
        self._loading: set[Key] = set()
        self._failed: dict[Key, str] = {}
        self._refused: dict[Key, str] = {}
        self._last_footprint: dict[Key, Footprint] = {}
        self._counts = _Counts()
        self._recent: deque[CacheEvent] = deque(maxlen=RECENT_EVENTS)
        self._one_load = threading.Lock()  # loads run one at a time, wherever asked
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-loader")

    # -- what a batch needs ----------------------------------------------------------

    def resident(self, key: Key) -> bool:
        with self._lock:
            return key in self._entries

    def refusal(self, key: Key) -> str | None:
        """Why ``key`` is never loaded (its footprint is over the budget), if it is not."""
        with self._lock:
            return self._refused.get(key)

    def failure(self, key: Key) -> str | None:
        """Why ``key``'s last load failed, until it is asked for again."""
        with self._lock:
            return self._failed.get(key)

    def settled(self, key: Key) -> bool:
        """Whether a batch of ``key`` can be dealt with now: it is loaded, refused, or
        its load failed (the batch then goes back for retry)."""
        with self._lock:
            return key in self._entries or key in self._refused or key in self._failed

    def pin(self, key: Key) -> bool:
        """Keep ``key`` loaded while a batch runs on it; False if it is not loaded."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False
            entry.pins += 1
            return True

    def unpin(self, key: Key) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.pins > 0:
                entry.pins -= 1
                self._lock.notify_all()  # a load waiting for room looks again

    @contextlib.contextmanager
    def using(self, record: ModelVersion) -> Iterator[ModelRuntime]:
        """``record``'s runtime, pinned and counted as used while the block runs;
        loaded here first if it is not (on the caller's thread: the pool loads ahead
        on its loader thread, so this happens only for work taken up unplanned)."""
        key = (record.model, record.version)
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    entry.pins += 1
                    entry.uses += 1
                    entry.last_used = self._clock()
                    self._entries.move_to_end(key)
                    break
            self._load(record, wait_for_room=False)
        try:
            yield entry.runtime
        finally:
            self.unpin(key)

    def request(self, record: ModelVersion) -> None:
        """Load ``record`` on the loader thread unless it is loaded or loading; the
        cache's ``on_ready`` is called once it is settled."""
        key = (record.model, record.version)
        with self._lock:
            if key in self._entries or key in self._loading or key in self._refused:
                return
            self._failed.pop(key, None)
            self._loading.add(key)
        self._loader.submit(self._load_ahead, record)

    def close(self) -> None:
        """Stop the loader thread (after the load in progress)."""
        self._loader.shutdown(wait=True, cancel_futures=True)

    # -- what is held --------------------------------------------------------------

    def held(self) -> Footprint:
        """The resident versions' footprints together."""
        with self._lock:
            return self._held()

    def snapshot(self) -> dict[str, Any]:
        """The resident versions, most recently used first, the totals and the
        counts, and the recent loads and evictions (the state a pool worker writes)."""
        with self._lock:
            resident = [
                {
                    "model": e.model,
                    "version": e.version,
                    "footprint_mib": round(e.footprint.host_mib, 1),
                    "device_footprint_mib": round(e.footprint.device_mib, 1),
                    "load_seconds": round(e.load_seconds, 3),
                    "loaded_at": round(e.loaded_at, 3),
                    "last_used": round(e.last_used, 3),
                    "uses": e.uses,
                }
                for e in reversed(self._entries.values())
            ]
            held = self._held()
            return {
                "budget_mib": self.budget.host_mib,
                "device_budget_mib": self.budget.device_mib if self._device_budget else None,
                "held_mib": round(held.host_mib, 1),
                "device_held_mib": round(held.device_mib, 1),
                "resident": resident,
                "loads": self._counts.loads,
                "evictions": self._counts.evictions,
                "refusals": self._counts.refusals,
                "failures": self._counts.failures,
                "loads_by_model": dict(self._counts.loads_by_model),
                "recent": [_event_dict(e) for e in self._recent],
            }

    # -- loading -------------------------------------------------------------------

    def _load_ahead(self, record: ModelVersion) -> None:
        key = (record.model, record.version)
        try:
            self._load(record, wait_for_room=True)
        except Exception:  # noqa: BLE001 - recorded as the version's failure or refusal
            pass
        finally:
            with self._lock:
                self._loading.discard(key)
            self._on_ready()

    def _load(self, record: ModelVersion, *, wait_for_room: bool) -> None:
        """Load ``record`` within the budget, one load at a time. A load asked for
        on the model's thread (``wait_for_room`` False) neither waits for another
        load, which may be waiting for that thread's batch to end, nor for room."""
        if not self._one_load.acquire(blocking=wait_for_room):
            raise NoRoom("another version is loading")
        try:
            self._load_alone(record, wait_for_room)
        finally:
            self._one_load.release()

    def _load_alone(self, record: ModelVersion, wait_for_room: bool) -> None:
        key = (record.model, record.version)
        with self._lock:
            if key in self._entries:
                return
            if key in self._refused:
                raise VersionTooLarge(self._refused[key])
            # Loaded before: room for its last footprint first, so that what it
            # holds as it loads is within the budget too.
            known = self._last_footprint.get(key)
            evicted, fits = self._make_room(known, wait_for_room) if known else ([], True)
        self._released(evicted)
        if not fits:
            raise NoRoom(self._in_the_way())
        began, before = time.perf_counter(), self._meter.sample()
        try:
            runtime = self._load_runtime(record)
        except Exception as exc:
            self._record_failure(key, f"{type(exc).__name__}: {exc}"[:300])
            raise
        seconds = time.perf_counter() - began
        after, floor = self._meter.sample(), self._meter.floor(runtime)
        footprint = Footprint(
            max(after.host_mib - before.host_mib, floor.host_mib, 0.0),
            max(after.device_mib - before.device_mib, floor.device_mib, 0.0),
        )
        if self._over(footprint):
            del runtime
            self._meter.release()
            reason = self._too_large(record, footprint)
            self._record(CacheEvent("refuse", *key, self._clock(), seconds, footprint, reason))
            raise VersionTooLarge(reason)
        with self._lock:
            evicted, fits = self._make_room(footprint, wait_for_room)
            now = self._clock()
            if fits:
                self._entries[key] = Entry(*key, runtime, footprint, seconds, now, now)
                self._last_footprint[key] = footprint
                self._counts.loads += 1
                by_model = self._counts.loads_by_model
                by_model[record.model] = by_model.get(record.model, 0) + 1
        if fits:
            self._record(CacheEvent("load", *key, now, seconds, footprint))
        self._released(evicted)
        if not fits:
            del runtime
            self._meter.release()
            raise NoRoom(self._in_the_way())

    def _make_room(self, need: Footprint, wait: bool) -> tuple[list[Entry], bool]:
        """Evict the least recently used versions no batch runs on until ``need``
        fits beside the rest (held: ``_lock``): the evicted, and whether it fits.
        Where only running versions are in the way, wait for their batches to end
        (``wait``), or give up."""
        evicted: list[Entry] = []
        while self._over(self._held() + need):
            victim = next((e for e in self._entries.values() if e.pins == 0), None)
            if victim is None:
                if not wait:
                    return evicted, False
                self._lock.wait(0.05)
                continue
            del self._entries[(victim.model, victim.version)]
            self._counts.evictions += 1
            evicted.append(victim)
        return evicted, True

    def _in_the_way(self) -> str:
        with self._lock:
            running = ", ".join(f"{e.model} {e.version}" for e in self._entries.values())
        return f"no room now: the versions in the way are running ({running})"

    def _released(self, evicted: list[Entry]) -> None:
        """Record the evictions and give their memory back (outside the lock)."""
        if not evicted:
            return
        for entry in evicted:
            self._record(
                CacheEvent(
                    "evict", entry.model, entry.version, self._clock(), None, entry.footprint
                )
            )
            entry.runtime = None  # type: ignore[assignment] - the cache's last reference
        evicted.clear()
        self._meter.release()

    def _held(self) -> Footprint:
        total = Footprint()
        for entry in self._entries.values():
            total = total + entry.footprint
        return total

    def _over(self, footprint: Footprint) -> bool:
        if footprint.host_mib > self.budget.host_mib:
            return True
        return self._device_budget and footprint.device_mib > self.budget.device_mib

    def _too_large(self, record: ModelVersion, footprint: Footprint) -> str:
        parts = [f"{footprint.host_mib:.0f} MiB of memory (budget {self.budget.host_mib:.0f})"]
        if self._device_budget:
            parts.append(
                f"{footprint.device_mib:.0f} MiB of GPU memory (budget "
                f"{self.budget.device_mib:.0f})"
            )
        return (
            f"{record.model} {record.version} needs {' and '.join(parts)}: more than its "
            "pool's worker may hold; give it a service of its own or a larger pool budget"
        )

    def _record_failure(self, key: Key, reason: str) -> None:
        with self._lock:
            self._failed[key] = reason
            self._counts.failures += 1
        self._record(CacheEvent("fail", *key, self._clock(), reason=reason))

    def _record(self, event: CacheEvent) -> None:
        with self._lock:
            if event.kind == "refuse":
                self._refused[(event.model, event.version)] = event.reason or ""
                self._counts.refusals += 1
            if event.kind in ("load", "evict"):
                self._recent.append(event)
        try:
            self._on_event(event)
        except Exception:  # noqa: BLE001 - a report is never worth the cache
            log.exception("model cache event not reported", extra={"event": event.kind})


def _event_dict(event: CacheEvent) -> dict[str, Any]:
    out = {k: v for k, v in asdict(event).items() if v is not None and k != "footprint"}
    if event.footprint is not None:
        out["footprint_mib"] = round(event.footprint.host_mib, 1)
        out["device_footprint_mib"] = round(event.footprint.device_mib, 1)
    if event.load_seconds is not None:
        out["load_seconds"] = round(event.load_seconds, 3)
    out["at"] = round(event.at, 3)
    return out
