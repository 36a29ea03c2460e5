"""A pool worker's model cache: versions loaded on first use and kept, least
recently used first, within the budget their measured footprints must fit."""

from __future__ import annotations

import random
import threading
import time

import pytest

from harness.waiting import wait_for
from switchyard_worker.model_cache import (
    CacheEvent,
    Footprint,
    ModelCache,
    NoRoom,
    ProcessMeter,
    VersionTooLarge,
)

# Footprint of each (model, version), MiB, as the fake meter measures it.
SIZES = {("a", "v1"): 40, ("b", "v1"): 30, ("c", "v1"): 50, ("a", "v2"): 45, ("huge", "v1"): 500}


class SizedRuntime:
    def __init__(self, model: str, version: str) -> None:
        self.key = (model, version)
        self.mib = SIZES[self.key]

    def predict(self, inputs):
        return inputs


class FakeMeter:
    """The process's memory: what the live runtimes hold (as a loaded version's
    footprint is measured on a real process: the sample after its load less the one
    before), plus ``noise`` MiB that other work holds at the sample after."""

    def __init__(self) -> None:
        self.live: dict[tuple[str, str], int] = {}
        self.noise = 0.0
        self.released = 0

    def sample(self) -> Footprint:
        return Footprint(sum(self.live.values()) + self.noise)

    def floor(self, runtime) -> Footprint:
        return Footprint(0.0)

    def release(self) -> None:
        self.released += 1


class Record:
    """What the cache reads of a registry record."""

    def __init__(self, model: str, version: str) -> None:
        self.model, self.version = model, version


class Harness:
    def __init__(self, budget: float = 100) -> None:
        self.meter = FakeMeter()
        self.events: list[CacheEvent] = []
        self.loads: list[tuple[str, str]] = []
        self.grows_while_loading = 0.0
        self.held_after_event: list[float] = []
        self.cache = ModelCache(
            load=self.load,
            memory_budget_mib=budget,
            meter=self.meter,
            on_event=self.on_event,
        )

    def load(self, record):
        self.meter.noise += self.grows_while_loading
        self.loads.append((record.model, record.version))
        runtime = SizedRuntime(record.model, record.version)
        self.meter.live[runtime.key] = runtime.mib
        return runtime

    def on_event(self, event: CacheEvent) -> None:
        self.events.append(event)
        if event.kind == "evict":
            self.meter.live.pop((event.model, event.version), None)
        self.held_after_event.append(self.cache.held().host_mib)

    def use(self, model: str, version: str = "v1") -> None:
        with self.cache.using(Record(model, version)):  # type: ignore[arg-type]
            pass

    def resident(self) -> list[tuple[str, str]]:
        return [(e["model"], e["version"]) for e in self.cache.snapshot()["resident"]]

    def kinds(self) -> list[tuple[str, str, str]]:
        return [(e.kind, e.model, e.version) for e in self.events]


def test_a_version_is_loaded_on_first_use_with_its_footprint_measured():
    # GIVEN an empty cache with a budget of 100 MiB
    h = Harness(budget=100)
    # WHEN a version is used twice
    h.use("a")
    h.use("a")
    # THEN it was loaded once, and its footprint is what the process grew by
    assert h.loads == [("a", "v1")]
    snapshot = h.cache.snapshot()
    assert snapshot["resident"][0]["footprint_mib"] == 40
    assert snapshot["resident"][0]["uses"] == 2
    assert snapshot["held_mib"] == 40 and snapshot["loads"] == 1
    assert snapshot["loads_by_model"] == {"a": 1}
    load = h.events[0]
    assert load.kind == "load" and load.load_seconds is not None and load.load_seconds >= 0


def test_the_least_recently_used_version_is_evicted_to_make_room():
    # GIVEN a and b loaded (70 of 100 MiB), then a used again
    h = Harness(budget=100)
    h.use("a")
    h.use("b")
    h.use("a")
    # WHEN c (50 MiB) is needed
    h.use("c")
    # THEN b, used least recently, made room; a stays
    assert ("evict", "b", "v1") in h.kinds()
    assert h.resident() == [("c", "v1"), ("a", "v1")]  # most recently used first
    assert h.cache.snapshot()["evictions"] == 1


def test_the_budget_is_never_exceeded_by_the_footprints_as_measured():
    # GIVEN a budget that holds two or three of four versions
    h = Harness(budget=100)
    keys = [("a", "v1"), ("b", "v1"), ("c", "v1"), ("a", "v2")]
    rng = random.Random(7)
    # WHEN they are used in a random order many times
    for _ in range(200):
        h.use(*rng.choice(keys))
        # THEN the resident versions' footprints always fit the budget
        assert h.cache.held().host_mib <= 100
    assert max(h.held_after_event) <= 100
    assert h.cache.snapshot()["evictions"] > 0


def test_a_footprint_measured_high_still_keeps_the_budget():
    # GIVEN other work that takes 20 MiB more while a loads
    h = Harness(budget=100)
    h.use("b")
    h.grows_while_loading = 20
    # WHEN a is loaded beside b
    h.use("a")
    # THEN a's footprint counts the 20 MiB: 30 + 60 fits, and the budget holds
    resident = {(e["model"]): e["footprint_mib"] for e in h.cache.snapshot()["resident"]}
    assert resident == {"a": 60, "b": 30}
    assert h.cache.held().host_mib <= 100


def test_a_version_larger_than_the_budget_is_refused_and_never_loaded_again():
    h = Harness(budget=100)
    h.use("a")
    # WHEN a version of 500 MiB is needed
    with pytest.raises(VersionTooLarge) as refused:
        h.use("huge")
    # THEN it is refused, saying what it needs and what the budget is, and the
    # versions loaded stay
    message = str(refused.value)
    assert "huge v1 needs 500 MiB of memory (budget 100)" in message
    assert "a service of its own or a larger pool budget" in message
    assert h.cache.refusal(("huge", "v1")) == message
    assert h.resident() == [("a", "v1")]
    assert h.meter.released >= 1  # what it held is given back
    # and it is not loaded again
    h.cache.request(Record("huge", "v1"))  # type: ignore[arg-type]
    with pytest.raises(VersionTooLarge):
        h.use("huge")
    assert h.loads.count(("huge", "v1")) == 1
    assert h.cache.snapshot()["refusals"] == 1


def test_a_canary_and_its_stable_version_are_two_entries():
    h = Harness(budget=100)
    h.use("a", "v1")
    h.use("a", "v2")
    snapshot = h.cache.snapshot()
    assert h.resident() == [("a", "v2"), ("a", "v1")]
    assert [e["footprint_mib"] for e in snapshot["resident"]] == [45, 40]
    assert snapshot["loads_by_model"] == {"a": 2}


def test_a_version_loaded_before_makes_room_for_its_last_footprint_before_it_loads():
    # GIVEN a loaded, then evicted by b and c
    h = Harness(budget=100)
    h.use("a")
    h.use("b")
    h.use("c")
    assert ("evict", "a", "v1") in h.kinds()
    evictions_before = len([k for k in h.kinds() if k[0] == "evict"])
    # WHEN a is needed again
    h.events.clear()
    h.use("a")
    # THEN room for its 40 MiB was made before it loaded, not after
    kinds = h.kinds()
    assert kinds[0][0] == "evict" and kinds[-1] == ("load", "a", "v1")
    assert len([k for k in h.kinds() if k[0] == "evict"]) >= 1
    assert h.cache.snapshot()["evictions"] > evictions_before


def test_a_load_ahead_waits_for_a_running_batch_before_evicting_its_version():
    # GIVEN a and b loaded, with a batch running on each (pinned)
    h = Harness(budget=100)
    h.use("a")
    h.use("b")
    ready = threading.Event()
    h.cache._on_ready = ready.set  # noqa: SLF001 - the pool's wake-up, watched here
    assert h.cache.pin(("a", "v1")) and h.cache.pin(("b", "v1"))
    # WHEN c is asked for on the loader thread
    h.cache.request(Record("c", "v1"))  # type: ignore[arg-type]
    time.sleep(0.2)
    # THEN it waits: no version is evicted under a running batch
    assert not ready.is_set()
    assert h.resident() == [("b", "v1"), ("a", "v1")]
    # and once a's batch ends, a makes room
    h.cache.unpin(("a", "v1"))
    wait_for(ready.is_set, 5, what="c to load")
    assert h.resident() == [("c", "v1"), ("b", "v1")]
    assert h.cache.held().host_mib <= 100
    h.cache.unpin(("b", "v1"))
    h.cache.close()


def test_a_load_on_the_models_thread_does_not_wait_for_its_own_batch():
    # GIVEN a and b loaded, both running (pinned by this thread)
    h = Harness(budget=100)
    h.use("a")
    h.use("b")
    h.cache.pin(("a", "v1"))
    h.cache.pin(("b", "v1"))
    # WHEN c is needed on this thread: THEN it gives up at once (the batch goes back
    # for retry) rather than wait for itself
    with pytest.raises(NoRoom, match="the versions in the way are running"):
        h.use("c")
    assert h.resident() == [("b", "v1"), ("a", "v1")]


def test_a_failed_load_is_reported_and_tried_again_when_asked_for_again():
    h = Harness(budget=100)
    attempts = []

    def flaky(record):
        attempts.append(record.version)
        if len(attempts) == 1:
            raise OSError("artifact missing")
        return h.load(record)

    h.cache._load_runtime = flaky  # noqa: SLF001 - a load that fails once
    ready = threading.Event()
    h.cache._on_ready = ready.set  # noqa: SLF001
    h.cache.request(Record("a", "v1"))  # type: ignore[arg-type]
    wait_for(ready.is_set, 5, what="the load to settle")
    assert h.cache.failure(("a", "v1")) == "OSError: artifact missing"
    assert h.cache.settled(("a", "v1")) and not h.cache.resident(("a", "v1"))
    ready.clear()
    h.cache.request(Record("a", "v1"))  # type: ignore[arg-type]
    wait_for(ready.is_set, 5, what="the second load")
    assert h.cache.resident(("a", "v1")) and h.cache.failure(("a", "v1")) is None
    h.cache.close()


def test_the_process_meter_counts_at_least_a_modules_tensors():
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(1024, 1024)  # 4 MiB of float32 weights

    class Runtime:
        def __init__(self) -> None:
            self._module = module

    floor = ProcessMeter().floor(Runtime())
    assert floor.host_mib == pytest.approx((1024 * 1024 + 1024) * 4 / (1 << 20))
    assert ProcessMeter().sample().host_mib > 0
