"""The local autoscaler's bookkeeping and acting (``switchyard_local.autoscaler``) and
the worker pool it drives (``switchyard_local.supervisor.WorkerPool``), with fake
queues, workers and processes. The rule itself is ``tests/unit/test_scaling.py``'s."""

from __future__ import annotations

import io
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.scaling_scenarios import SAMPLE_POLICY
from harness.waiting import wait_for
from switchyard.scaling import LaneSignals, ScalingPolicy
from switchyard_local.autoscaler import (
    HOLD_LOG_SECONDS,
    METRICS_SECONDS,
    Autoscaler,
    WarmFloorTooHigh,
    WorkerCounts,
    local_policy,
    queue_name,
)
from switchyard_local.supervisor import DRAIN_TIMEOUT_SECONDS, WorkerPool

MODEL = "minilm-embed"
POLICY = SAMPLE_POLICY


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakeQueues:
    """Queue signals set by the test."""

    def __init__(self) -> None:
        self.lanes = {MODEL: {"realtime": LaneSignals(), "batch": LaneSignals()}}
        self.failing = False

    def set(self, lane: str = "realtime", visible: int = 0, in_flight: int = 0, age: float = 0):
        self.lanes[MODEL][lane] = LaneSignals(visible, in_flight, age)

    def read(self) -> dict[str, dict[str, LaneSignals]]:
        if self.failing:
            raise ConnectionError("the emulator is gone")
        return {model: dict(lanes) for model, lanes in self.lanes.items()}


@dataclass
class FakeWorkers:
    """Workers that start when asked and become ready when the test says so."""

    starting: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    draining: list[str] = field(default_factory=list)
    started: int = 0
    ready_at: float | None = None

    def counts(self, model: str) -> WorkerCounts:
        return WorkerCounts(
            len(self.running), len(self.starting), len(self.draining), self.ready_at
        )

    def start(self, model: str, count: int) -> list[str]:
        names = [f"worker-{model}-{self.started + i}" for i in range(count)]
        self.started += count
        self.starting += names
        return names

    def stop(self, model: str, count: int) -> list[str]:
        chosen = (self.starting[::-1] + self.running[::-1])[:count]
        for name in chosen:
            (self.starting if name in self.starting else self.running).remove(name)
        self.draining += chosen
        return chosen

    def all_ready(self) -> None:
        self.running += self.starting
        self.starting = []


@dataclass
class Rig:
    autoscaler: Autoscaler
    queues: FakeQueues
    workers: FakeWorkers
    clock: Clock
    log: io.StringIO
    said: list[str]
    state_path: Path

    def tick(self, after: float = 1.0):
        self.clock.now += after
        return self.autoscaler.tick().get(MODEL)

    def records(self, message: str = "scaling decision") -> list[dict]:
        lines = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [line for line in lines if line.get("message") == message]

    def metrics(self) -> list[dict]:
        lines = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [line for line in lines if "_aws" in line]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path, POLICY)


def make_rig(tmp_path: Path, policy: ScalingPolicy) -> Rig:
    queues, workers, clock, log, said = FakeQueues(), FakeWorkers(), Clock(), io.StringIO(), []
    state_path = tmp_path / "scaling.json"
    autoscaler = Autoscaler(
        {MODEL: policy},
        queues,
        workers,
        log,
        state_path=state_path,
        announce=said.append,
        clock=clock,
        wall_clock=clock,
    )
    return Rig(autoscaler, queues, workers, clock, log, said, state_path)


def test_work_at_zero_starts_a_worker_at_once_and_says_why(rig: Rig) -> None:
    # GIVEN no worker, WHEN a message arrives
    rig.queues.set(visible=1, age=0.4)
    decision = rig.tick()

    # THEN a worker starts in this round, and the decision is logged with its inputs
    assert decision is not None and decision.action == "wake"
    assert rig.workers.starting == [f"worker-{MODEL}-0"]
    [record] = rig.records()
    assert record["action"] == "wake" and record["workers"] == 0 and record["desired"] == 1
    assert record["reason"] == decision.reason
    assert record["started"] == [f"worker-{MODEL}-0"]
    assert record["inputs"]["lanes"]["realtime"] == {
        "visible": 1,
        "in_flight": 0,
        "oldest_age_seconds": 0.4,
    }
    assert record["policy"]["idle_seconds"] == 900
    assert rig.said == [f"SCALE {MODEL} 0 -> 1 (wake): {decision.reason}"]


def test_a_slow_start_is_capacity_on_the_way_never_stopped_and_never_doubled(rig: Rig) -> None:
    # GIVEN a worker started for one message
    rig.queues.set(visible=1)
    rig.tick()

    # WHEN it takes ten minutes to load while the message waits
    for _ in range(600):
        rig.tick()

    # THEN nothing else is started and nothing is stopped
    assert rig.workers.started == 1 and rig.workers.draining == []


def test_a_backlog_just_after_a_wake_scales_out_at_once_and_then_cools_down(rig: Rig) -> None:
    # GIVEN a worker woken at t0 and running
    rig.queues.set(visible=5)
    rig.tick()
    rig.workers.all_ready()

    # WHEN the backlog grows to what three workers hold, 10 s after the wake
    rig.queues.set(visible=30)
    grown = rig.tick(after=10)

    # THEN it scales out at once (a wake starts no cool-down)
    assert grown is not None and grown.action == "scale_out"
    assert rig.workers.started == 3
    rig.workers.all_ready()

    # AND a scale-out does: more backlog holds until its cool-down has passed
    rig.queues.set(visible=50)
    held = rig.tick(after=10)
    assert held is not None and held.action == "hold" and "cool-down" in held.reason
    rig.tick(after=POLICY.scale_out_cooldown_seconds - 10)
    assert rig.workers.started > 3  # (by at most its step)
    assert [r["action"] for r in rig.records() if r["desired"] != r["workers"]] == [
        "wake",
        "scale_out",
        "scale_out",
    ]


def test_idle_time_counts_from_the_last_work_seen_in_any_lane(rig: Rig) -> None:
    # GIVEN two running workers, and work in flight on the batch lane only
    rig.workers.running = ["a", "b"]
    rig.queues.set("batch", in_flight=3)
    rig.tick()

    # WHEN the work ends, THEN they stay for the idle time after the last work seen
    rig.queues.set("batch")
    assert rig.tick(after=POLICY.idle_seconds - 1).action == "hold"
    assert rig.workers.draining == []
    decision = rig.tick(after=1)

    # AND then both drain, down to the minimum
    assert decision.action == "scale_in" and decision.desired == 0
    assert sorted(rig.workers.draining) == ["a", "b"]
    assert rig.records()[-1]["stopped"] == ["b", "a"]


def test_an_old_message_adds_a_worker_only_once_the_last_one_has_run_a_while(rig: Rig) -> None:
    # GIVEN one worker that became ready five seconds ago, and a message two minutes old
    rig.workers.running = ["a"]
    rig.workers.ready_at = rig.clock.now - 5
    rig.queues.set(visible=1, age=120)

    # WHEN the autoscaler looks, THEN the age is blamed on the start, not the worker
    assert rig.tick().action == "hold"
    assert rig.records()[-1]["inputs"]["since_ready_seconds"] == 6.0
    # AND once the worker has run for the target age, the age asks for one more
    assert rig.tick(after=POLICY.target_age_seconds).action == "scale_out"
    assert rig.workers.started == 1


def test_a_worker_still_draining_counts_as_neither_running_nor_starting(rig: Rig) -> None:
    # GIVEN a worker asked to stop that has not exited yet
    rig.workers.draining = ["old"]

    # WHEN work arrives, THEN a new worker starts rather than waiting for it
    rig.queues.set(visible=1)
    assert rig.tick().action == "wake"
    assert rig.workers.started == 1


def test_a_failed_read_decides_nothing_and_is_logged_once(rig: Rig) -> None:
    # GIVEN a worker running, WHEN the queues cannot be read for two rounds
    rig.workers.running = ["a"]
    rig.queues.failing = True
    assert rig.autoscaler.tick() == {}
    assert rig.autoscaler.tick() == {}

    # THEN nothing was decided or done, and the outage is one line, and its end another
    assert rig.records() == [] and rig.workers.draining == []
    rig.queues.failing = False
    rig.tick()
    assert len(rig.records("queue signals unavailable")) == 1
    assert len(rig.records("queue signals available again")) == 1


def test_holds_are_logged_now_and_then_not_every_round(rig: Rig) -> None:
    # WHEN a quiet model is looked at every second for two minutes
    for _ in range(120):
        rig.tick()

    # THEN its holds are logged every HOLD_LOG_SECONDS, and nothing is announced
    assert len(rig.records()) == 120 // HOLD_LOG_SECONDS
    assert {r["action"] for r in rig.records()} == {"hold"}
    assert rig.said == []


def test_worker_counts_are_emitted_on_change_and_every_few_seconds(rig: Rig) -> None:
    # GIVEN a first round (emitted), WHEN nothing changes for a few rounds
    rig.tick()
    for _ in range(int(METRICS_SECONDS) - 1):
        rig.tick()
    assert len(rig.metrics()) == 1

    # THEN a change is emitted at once, and a steady state again after METRICS_SECONDS
    rig.queues.set(visible=1)
    rig.tick()
    last = rig.metrics()[-1]
    figures = (last["DesiredWorkers"], last["RunningWorkers"], last["StartingWorkers"])
    assert figures == ([1], [0], [0])
    assert last["model"] == MODEL and last["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["model"]
    ]
    rig.tick()  # the started worker is now counted as starting: a change
    assert rig.metrics()[-1]["StartingWorkers"] == [1]
    emitted = len(rig.metrics())
    rig.tick(after=METRICS_SECONDS)
    assert len(rig.metrics()) == emitted + 1


def test_the_state_file_has_each_models_workers_lanes_and_last_decisions(rig: Rig) -> None:
    # GIVEN a wake, WHEN the next round holds
    rig.queues.set(visible=2, age=3.0)
    rig.tick()
    rig.tick()

    # THEN the file has the current figures, the last decision and the last change
    state = json.loads(rig.state_path.read_text())
    model = state["models"][MODEL]
    assert model["workers"] == {"running": 0, "starting": 1, "desired": 1, "draining": 0}
    assert model["lanes"]["realtime"] == {"visible": 2, "in_flight": 0, "oldest_age_seconds": 3.0}
    assert model["lanes"]["batch"] == {"visible": 0, "in_flight": 0, "oldest_age_seconds": 0.0}
    assert model["last_decision"]["action"] == "hold"
    assert model["last_change"]["action"] == "wake"
    assert model["last_change"]["inputs"]["since_scale_out_seconds"] is None
    assert not list(rig.state_path.parent.glob(".*.tmp"))


def test_the_local_floor_and_idle_time_replace_the_stages(tmp_path: Path) -> None:
    # GIVEN dev's policy, WHEN run with a warm floor and a short idle time
    policy = local_policy(POLICY, min_workers=1, idle_seconds=5)

    # THEN they replace the stage's, and the rest is the manifest's
    assert (policy.min_tasks, policy.idle_seconds, policy.max_tasks) == (1, 5, 4)
    assert local_policy(POLICY) == POLICY
    # AND a floor above the maximum is refused
    with pytest.raises(WarmFloorTooHigh, match="above the maximum of 4"):
        local_policy(POLICY, min_workers=5)
    # AND a platform with a warm floor starts with it, before any request
    rig = make_rig(tmp_path, policy)
    assert rig.tick().action == "raise_to_minimum"
    assert rig.workers.started == 1


def test_queue_name_is_the_urls_last_segment() -> None:
    assert queue_name("http://127.0.0.1:5000/123456789012/sy-dev-m-realtime") == "sy-dev-m-realtime"


# -- the worker pool ---------------------------------------------------------------


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)
        self.returncode = -9


class FakeChild:
    """A worker process handle (``supervisor.Child``) that runs nothing."""

    pids = iter(range(100, 10_000))

    def __init__(self, name: str) -> None:
        self.name = name
        self.process: FakeProcess | None = None
        self.restarts = 0
        self.closed = False

    def start(self) -> None:
        self.process = FakeProcess(next(self.pids))

    def restart(self, launch=None) -> None:
        self.restarts += 1
        (launch or FakeChild.start)(self)

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def stop(self, timeout: float) -> None:
        self.closed = True


@pytest.fixture
def pool(tmp_path: Path) -> tuple[WorkerPool, dict[str, FakeChild], Clock, list[tuple]]:
    made: dict[str, FakeChild] = {}
    notes: list[tuple] = []

    def make(model: str, name: str) -> FakeChild:
        made[name] = FakeChild(name)
        return made[name]

    clock = Clock()
    workers = WorkerPool(
        make,  # type: ignore[arg-type]
        tmp_path,
        announce=lambda _: None,
        note=lambda model, message, **fields: notes.append((message, fields.get("worker"))),
        clock=clock,
    )
    return workers, made, clock, notes


def tally(workers: WorkerPool) -> tuple[int, int, int]:
    counts = workers.counts(MODEL)
    return counts.running, counts.starting, counts.draining


def test_a_worker_is_running_once_its_ready_file_exists(pool, tmp_path: Path) -> None:
    workers, made, _, _ = pool
    # GIVEN two workers started, WHEN one has loaded its models
    assert workers.start(MODEL, 2) == [f"worker-{MODEL}-0", f"worker-{MODEL}-1"]
    (tmp_path / f"worker-{MODEL}-0.ready").write_text("host-100")

    # THEN one is running since then, and one starting
    counts = workers.counts(MODEL)
    assert (counts.running, counts.starting, counts.draining) == (1, 1, 0)
    assert counts.last_ready_at == (tmp_path / f"worker-{MODEL}-0.ready").stat().st_mtime


def test_stopping_takes_the_starting_first_then_the_newest_and_they_drain(
    pool, tmp_path: Path
) -> None:
    workers, made, _, notes = pool
    workers.start(MODEL, 3)
    for i in (0, 1):
        (tmp_path / f"worker-{MODEL}-{i}.ready").write_text("ready")

    # WHEN two are asked to stop
    stopped = workers.stop(MODEL, 2)

    # THEN the one still starting and the newest running one get SIGTERM and drain
    assert stopped == [f"worker-{MODEL}-2", f"worker-{MODEL}-1"]
    assert made[f"worker-{MODEL}-1"].process.signals == [signal.SIGTERM]
    assert tally(workers) == (1, 0, 2)
    # AND once they exit they leave the pool, not restarted
    for name in stopped:
        made[name].process.returncode = 0
    workers.reap()
    assert tally(workers) == (1, 0, 0)
    assert [c.restarts for c in made.values()] == [0, 0, 0]
    assert not (tmp_path / f"worker-{MODEL}-1.ready").exists()
    assert ("worker stopped", f"worker-{MODEL}-1") in notes
    # AND a new worker gets a new name
    assert workers.start(MODEL, 1) == [f"worker-{MODEL}-3"]


def test_a_worker_that_dies_unasked_is_replaced_under_its_name(pool, tmp_path: Path) -> None:
    workers, made, _, notes = pool
    workers.start(MODEL, 1)
    ready = tmp_path / f"worker-{MODEL}-0.ready"
    ready.write_text("ready")

    # WHEN it dies
    made[f"worker-{MODEL}-0"].process.returncode = -9
    workers.reap()

    # THEN the same worker restarts, counted as starting: not a scale-in
    assert made[f"worker-{MODEL}-0"].restarts == 1
    assert not ready.exists()
    assert tally(workers) == (0, 1, 0)
    assert notes == [("worker replaced", f"worker-{MODEL}-0")]


def test_a_worker_draining_past_the_stop_timeout_is_killed(pool) -> None:
    workers, made, clock, _ = pool
    workers.start(MODEL, 1)
    workers.stop(MODEL, 1)
    child = made[f"worker-{MODEL}-0"]

    workers.reap()
    clock.now += DRAIN_TIMEOUT_SECONDS + 1
    workers.reap()  # killed
    workers.reap()  # and gone

    assert child.process.signals == [signal.SIGTERM, signal.SIGKILL]
    assert workers.counts(MODEL) == WorkerCounts()


def test_a_round_that_fails_is_logged_and_the_next_one_runs(rig: Rig, monkeypatch) -> None:
    # GIVEN workers that cannot be started once (a spawn failed)
    monkeypatch.setattr("switchyard_local.autoscaler.TICK_SECONDS", 0.01)
    start = rig.workers.start
    failures = []

    def start_once_failing(model: str, count: int) -> list[str]:
        if not failures:
            failures.append(model)
            raise OSError("no more processes")
        return start(model, count)

    rig.workers.start = start_once_failing  # type: ignore[method-assign]
    rig.queues.set(visible=1)

    # WHEN the autoscaler runs on its own thread until a worker has started
    stop = threading.Event()
    thread = threading.Thread(target=rig.autoscaler.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 10
    while not rig.workers.started and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)

    # THEN the failure is in the log, and a later round started the worker
    [failed] = rig.records("scaling round failed")
    assert "no more processes" in failed["error"]
    assert rig.workers.started == 1


# --- Standby workers: real processes that follow the standby's protocol -----------

# Like ``python -m switchyard_worker --standby``: wait for one line on stdin, take its
# environment and log, and serve (here: write the ready file, then wait for SIGTERM).
STANDBY_SCRIPT = """
import json, os, signal, sys, time
line = sys.stdin.readline()
if not line.strip():
    sys.exit(0)
order = json.loads(line)
with open(order["log"], "a") as log:
    log.write("serving " + order["env"]["NAME"] + " as standby\\n")
open(order["env"]["READY"], "w").close()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.05)
"""
COLD_SCRIPT = """
import os, signal, sys, time
with open(os.environ["LOG"], "a") as log:
    log.write("serving " + os.environ["NAME"] + " cold\\n")
open(os.environ["READY"], "w").close()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def standby_pool(tmp_path: Path):
    from switchyard_local.supervisor import Child

    def make_worker(model: str, name: str) -> Child:
        log = tmp_path / f"{name}.log"
        env = {"NAME": name, "READY": str(tmp_path / f"{name}.ready"), "LOG": str(log)}
        return Child(name, [sys.executable, "-c", COLD_SCRIPT], env, log)

    def make_standby(index: int) -> Child:
        argv = [sys.executable, "-c", STANDBY_SCRIPT]
        return Child(f"standby-{index}", argv, {}, tmp_path / "standby.log", piped_stdin=True)

    workers = WorkerPool(
        make_worker,
        tmp_path,
        announce=lambda _: None,
        make_standby=make_standby,
        standby_workers=1,
    )
    yield workers
    workers.stop_all(timeout=10)


def test_a_started_worker_takes_over_the_waiting_standby(standby_pool, tmp_path: Path) -> None:
    workers = standby_pool
    # GIVEN a pool whose standby is waiting
    workers.reap()
    assert workers.standbys == 1
    # WHEN two workers are started
    workers.start(MODEL, 2)
    # THEN the first became the standby's process, with its own log and settings; the
    # second started cold, as there was one standby
    wait_for(
        lambda: workers.counts(MODEL).running == 2,
        timeout_s=20,
        every_s=0.05,
        what="two workers running",
    )
    assert (
        tmp_path / f"worker-{MODEL}-0.log"
    ).read_text() == f"serving worker-{MODEL}-0 as standby\n"
    assert (tmp_path / f"worker-{MODEL}-1.log").read_text() == f"serving worker-{MODEL}-1 cold\n"
    # AND a new standby is started only once no worker is loading
    assert workers.standbys == 0
    workers.reap()
    assert workers.standbys == 1


def test_a_worker_that_dies_is_replaced_in_the_waiting_standby(
    standby_pool, tmp_path: Path
) -> None:
    workers = standby_pool
    workers.reap()
    [name] = workers.start(MODEL, 1)  # in the first standby
    wait_for(lambda: workers.counts(MODEL).running == 1, timeout_s=20, every_s=0.05,
             what="one worker running")  # fmt: skip
    workers.reap()
    wait_for(lambda: workers.standbys == 1, timeout_s=20, every_s=0.05, what="a new standby")
    # WHEN the worker dies unasked
    [child] = workers.workers
    child.process.kill()
    child.process.wait()
    workers.reap()
    # THEN its replacement, under its name, takes over the waiting standby: not cold
    wait_for(lambda: workers.counts(MODEL).running == 1, timeout_s=20, every_s=0.05,
             what="the replacement running")  # fmt: skip
    served = (tmp_path / f"{name}.log").read_text().splitlines()
    assert served == [f"serving {name} as standby"] * 2
    assert child.restarts == 1


def test_no_new_standby_while_a_worker_loads(standby_pool, tmp_path: Path) -> None:
    workers = standby_pool
    workers.reap()
    # GIVEN a worker that has not yet written its ready file
    [name] = workers.start(MODEL, 1)
    ready = tmp_path / f"{name}.ready"
    wait_for(ready.exists, timeout_s=20, every_s=0.05, what=f"{ready} to be written")
    ready.unlink()  # as if it were still loading
    # WHEN the pool is reaped THEN no standby takes the cores from its loading
    workers.reap()
    assert workers.standbys == 0


def test_a_dead_standby_is_passed_over_and_replaced(standby_pool, tmp_path: Path) -> None:
    workers = standby_pool
    workers.reap()
    [standby] = workers._standbys
    standby.process.kill()
    standby.process.wait()
    # WHEN a worker starts THEN it starts cold rather than into the dead standby
    [name] = workers.start(MODEL, 1)
    wait_for(
        lambda: workers.counts(MODEL).running == 1,
        timeout_s=20,
        every_s=0.05,
        what="one worker running",
    )
    assert (tmp_path / f"{name}.log").read_text() == f"serving {name} cold\n"
    # AND once it is loaded a fresh standby waits
    workers.reap()
    assert workers.standbys == 1 and workers._standbys[0] is not standby


def test_stopping_the_pool_stops_its_standbys(standby_pool) -> None:
    workers = standby_pool
    workers.reap()
    [standby] = workers._standbys
    workers.stop_all(timeout=10)
    assert standby.process.poll() is not None
    assert workers.standbys == 0
