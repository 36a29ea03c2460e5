"""CPU overflow's gates: a CPU pool takes a GPU pool's ``cpu_capable`` model's work
while that pool has no worker running, or while the model's oldest message is older
than the pool's ``cpu_overflow_after_ms``; it reads each signal no more often than
it is told, and a failed read leaves the gates as they were."""

from __future__ import annotations

import pytest

from switchyard.overflow import OverflowSource, overflow_open
from switchyard_worker.overflow import RUNNING_READ_SECONDS, OverflowGates


@pytest.mark.parametrize(
    ("running", "age", "after_ms", "open_"),
    [
        (0, 0.0, 2000, True),  # the GPU pool is at zero: at once
        (1, 0.0, 2000, False),  # a GPU worker runs and nothing waits
        (1, 2.0, 2000, False),  # waited exactly the limit: not yet
        (1, 2.001, 2000, True),  # waited longer
        (3, 30.0, 0, True),  # after_ms 0: any wait at all
    ],
)
def test_the_rule(running, age, after_ms, open_):
    assert (
        overflow_open(running_workers=running, oldest_age_seconds=age, after_ms=after_ms) is open_
    )


class Signals:
    """What the gates read: each GPU pool's running workers, each queue's age."""

    def __init__(self) -> None:
        self.running = {"gpu": 1}
        self.ages = {"m-realtime": 0.0, "m-batch": 0.0}
        self.reads = {"running": 0, "ages": 0}
        self.failing = False

    def running_of(self, pool: str) -> int:
        self.reads["running"] += 1
        if self.failing:
            raise ConnectionError("no answer")
        return self.running[pool]

    def ages_of(self, names: list[str]) -> dict[str, float]:
        self.reads["ages"] += 1
        if self.failing:
            raise ConnectionError("no answer")
        return {n: self.ages[n] for n in names}


def _gates(signals: Signals, clock: list[float], age_every: float = 30.0) -> OverflowGates:
    return OverflowGates(
        {"m": OverflowSource(pool="gpu", after_ms=2000)},
        queue_names={"m": ["m-realtime", "m-batch"]},
        running=signals.running_of,
        ages=signals.ages_of,
        age_read_seconds=age_every,
        clock=lambda: clock[0],
    )


def test_a_gate_opens_when_the_gpu_pool_stops_and_when_work_waits_too_long():
    signals, clock = Signals(), [100.0]
    gates = _gates(signals, clock, age_every=5.0)
    assert gates.models == frozenset({"m"})
    assert not gates.is_open("m")  # a GPU worker runs, nothing waits
    # The GPU pool's last worker stops: open within one read of the running workers.
    signals.running["gpu"] = 0
    assert not gates.is_open("m")  # not read again yet
    clock[0] += RUNNING_READ_SECONDS
    assert gates.is_open("m")
    # A worker runs again; the batch lane's oldest message waits 2.5 s (the oldest
    # of the model's two queues counts): open once the ages are read again.
    signals.running["gpu"] = 1
    signals.ages["m-batch"] = 2.5
    clock[0] += RUNNING_READ_SECONDS
    assert not gates.is_open("m")  # the ages of 4 s ago
    clock[0] += 4.0
    assert gates.is_open("m")
    signals.ages["m-batch"] = 0.1
    clock[0] += 5.0
    assert not gates.is_open("m")


def test_reads_are_shared_and_no_more_often_than_told():
    signals, clock = Signals(), [0.0]
    gates = _gates(signals, clock, age_every=30.0)
    for _ in range(50):  # every intake thread asking, many times a second
        gates.is_open("m")
    assert signals.reads == {"running": 1, "ages": 1}
    clock[0] += 29.0
    gates.is_open("m")
    assert signals.reads == {"running": 2, "ages": 1}
    clock[0] += 1.0
    gates.is_open("m")
    assert signals.reads == {"running": 3, "ages": 2}


def test_a_failed_read_leaves_the_gate_as_it_was():
    signals, clock = Signals(), [0.0]
    signals.running["gpu"] = 0
    gates = _gates(signals, clock)
    assert gates.is_open("m")
    signals.failing = True
    signals.running["gpu"] = 1
    clock[0] += 60.0
    assert gates.is_open("m")  # still what was last read
    signals.failing = False
    clock[0] += RUNNING_READ_SECONDS
    assert not gates.is_open("m")
