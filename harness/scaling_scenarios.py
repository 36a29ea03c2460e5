"""Scaling scenarios that both the pure policy (``tests/unit/test_scaling.py``) and
the synthesized cloud alarms (``tests/infra/test_scaling.py``) are checked on, and
the simulator that replays traces through the policy (the unit tests' bursty traces,
and the scaling benchmark's live burst, ``bench/scaling.py``).

Each scenario builds its signals from a policy (a backlog is a multiple of that
policy's ``backlog_per_task``, an age a multiple of its target), so the same table
runs on a fixed test policy and on every model and stage of the manifest. Cool-downs
have long passed in every scenario but those with an earlier decision (``before``):
there the earlier decision is the policy's own, taken on the ``before`` signals, and
the cool-down it starts is the policy's rule (``Decision.starts_scale_out_cooldown``)
here and, in the cloud, the cool-down of the step policy its alarm drove.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from switchyard.scaling import (
    Action,
    Decision,
    LaneSignals,
    ScalingPolicy,
    ScalingSignals,
    decide,
)


@dataclass(frozen=True)
class Earlier:
    """A decision taken ``seconds_ago`` on these signals, before the scenario's."""

    signals: Callable[[ScalingPolicy], ScalingSignals]
    seconds_ago: float


@dataclass(frozen=True)
class Scenario:
    name: str
    signals: Callable[[ScalingPolicy], ScalingSignals]
    # What decide does, given the policy: (desired count, action).
    expected: Callable[[ScalingPolicy], tuple[int, Action]]
    before: Earlier | None = None

    def given(self, policy: ScalingPolicy) -> ScalingSignals:
        """The scenario's signals, with the cool-down its earlier decision started."""
        now = self.signals(policy)
        if self.before is None:
            return now
        earlier = decide(policy, self.before.signals(policy))
        if not earlier.starts_scale_out_cooldown:
            return now
        return replace(now, since_scale_out_seconds=self.before.seconds_ago)


# A dev-like policy with a small backlog per worker, for tests of what reads or
# acts on decisions (the autoscaler, status) rather than of the rule itself.
SAMPLE_POLICY = ScalingPolicy(
    min_tasks=0,
    max_tasks=4,
    backlog_per_task=10,
    target_age_seconds=60,
    scale_out_cooldown_seconds=60,
    scale_in_cooldown_seconds=300,
    idle_seconds=900,
)


def signals(
    *,
    visible: int = 0,
    in_flight: int = 0,
    age: float = 0.0,
    batch_visible: int = 0,
    running: int = 0,
    starting: int = 0,
    idle: float = 0.0,
    ready: float = math.inf,
) -> ScalingSignals:
    lanes = {
        "realtime": LaneSignals(visible, in_flight, age if visible or in_flight else 0.0),
        "batch": LaneSignals(batch_visible, 0, 0.0),
    }
    if visible + in_flight + batch_visible == 0 and idle == 0.0:
        idle = math.inf
    return ScalingSignals(
        lanes=lanes,
        running=running,
        starting=starting,
        idle_seconds=idle,
        since_ready_seconds=ready,
    )


def fits(policy: ScalingPolicy) -> bool:
    """The scenarios' expectations hold for a policy with min_tasks <= 1 and
    max_tasks >= 3 (every model and stage of the manifest has that)."""
    return policy.min_tasks <= 1 and policy.max_tasks >= 3


def _idle_at_zero(p: ScalingPolicy) -> tuple[int, Action]:
    return (0, "hold") if p.min_tasks == 0 else (p.min_tasks, "raise_to_minimum")


SCENARIOS = [
    Scenario("idle at zero", lambda p: signals(), _idle_at_zero),
    Scenario("a request at zero", lambda p: signals(visible=1), lambda p: (1, "wake")),
    Scenario("a batch chunk at zero", lambda p: signals(batch_visible=1), lambda p: (1, "wake")),
    Scenario(
        "work in flight and no worker (one died holding it)",
        lambda p: signals(in_flight=3),
        lambda p: (1, "wake"),
    ),
    Scenario(
        "a burst of 2.5 times the backlog per task at zero",
        lambda p: signals(visible=p.backlog_per_task * 5 // 2),
        lambda p: (3, "wake"),
    ),
    Scenario(
        "a burst of 10 times at zero",
        lambda p: signals(visible=p.backlog_per_task * 10),
        lambda p: (p.max_tasks, "wake"),
    ),
    Scenario(
        "backlog at 1 times, one worker",
        lambda p: signals(visible=p.backlog_per_task, age=1.0, running=1),
        lambda p: (1, "hold"),
    ),
    Scenario(
        "backlog at 2.5 times, one worker",
        lambda p: signals(visible=p.backlog_per_task * 5 // 2, age=1.0, running=1),
        lambda p: (3, "scale_out"),
    ),
    Scenario(
        "backlog at 2.5 times in the batch lane, one worker",
        lambda p: signals(batch_visible=p.backlog_per_task * 5 // 2, running=1),
        lambda p: (3, "scale_out"),
    ),
    Scenario(
        "backlog at 10 times, one worker: up to the maximum",
        lambda p: signals(visible=p.backlog_per_task * 10, age=1.0, running=1),
        lambda p: (p.max_tasks, "scale_out"),
    ),
    Scenario(
        "backlog at 2.5 times, one worker running and two starting: wait for them",
        lambda p: signals(visible=p.backlog_per_task * 5 // 2, age=1.0, running=1, starting=2),
        lambda p: (3, "hold"),
    ),
    Scenario(
        "a slow start: one worker loading for ten times the target age, its backlog aging",
        lambda p: signals(visible=p.backlog_per_task, age=10 * p.target_age_seconds, starting=1),
        lambda p: (1, "hold"),
    ),
    Scenario(
        "aged queue: one message, at twice the target age, one worker",
        lambda p: signals(visible=1, age=2 * p.target_age_seconds, running=1),
        lambda p: (2, "scale_out"),
    ),
    Scenario(
        "aged queue, a second worker still starting: wait for it",
        lambda p: signals(visible=1, age=2 * p.target_age_seconds, running=1, starting=1),
        lambda p: (2, "hold"),
    ),
    Scenario(
        "aged queue, the second worker ready only just now: give it time",
        lambda p: signals(visible=1, age=2 * p.target_age_seconds, running=2, ready=0.0),
        lambda p: (2, "hold"),
    ),
    Scenario(
        "oldest message under the target age",
        lambda p: signals(visible=1, age=p.target_age_seconds / 2, running=1),
        lambda p: (1, "hold"),
    ),
    Scenario(
        "aged queue at the maximum",
        lambda p: signals(visible=1, age=2 * p.target_age_seconds, running=p.max_tasks),
        lambda p: (p.max_tasks, "hold"),
    ),
    Scenario(
        "backlog at 10 times at the maximum",
        lambda p: signals(visible=p.backlog_per_task * 10, age=1.0, running=p.max_tasks),
        lambda p: (p.max_tasks, "hold"),
    ),
    Scenario(
        "above the maximum",
        lambda p: signals(visible=1, running=p.max_tasks + 1),
        lambda p: (p.max_tasks, "lower_to_maximum"),
    ),
    Scenario(
        "only in flight, three workers: no scale-in under load",
        lambda p: signals(in_flight=5, running=3),
        lambda p: (3, "hold"),
    ),
    Scenario(
        "idle after a burst, for half the idle time",
        lambda p: signals(running=2, idle=p.idle_seconds / 2),
        lambda p: (2, "hold"),
    ),
    Scenario(
        "idle after a burst, for the idle time",
        lambda p: signals(running=2, idle=p.idle_seconds),
        lambda p: (p.min_tasks, "scale_in"),
    ),
    # One request wakes the model; half a cool-down later a burst of 5.1 times the
    # backlog per task arrives (1,017 at 200): the wake started no cool-down.
    Scenario(
        "a backlog that arrives just after a wake scales out at once",
        lambda p: signals(visible=p.backlog_per_task * 51 // 10, age=1.0, running=1),
        lambda p: (min(6, p.max_tasks), "scale_out"),
        before=Earlier(lambda p: signals(visible=1), seconds_ago=30.0),
    ),
]


@dataclass
class Simulator:
    """A model's queue and workers, ticked: the decision is fed back as workers
    started (capacity after ``start_ticks``; with ``standby_ticks``, the first worker
    of a wake from zero after that many, as the local platform's standby) or stopped,
    and each running worker takes ``per_worker`` messages a tick, which stay in
    flight for that tick; the scale-out cool-down counts from each decision that
    starts it, as the local autoscaler's does. ``timeline`` has every tick's figures."""

    policy: ScalingPolicy
    tick_seconds: float = 5.0
    start_ticks: int = 4
    per_worker: float = 50
    standby_ticks: int | None = None
    queue: deque[float] = field(default_factory=deque)  # arrival times
    in_flight: int = 0
    running: int = 0
    starting: list[float] = field(default_factory=list)  # when each becomes running
    last_work: float = -math.inf
    last_ready: float = -math.inf
    last_scale_out: float = -math.inf
    last_down: float = -math.inf
    desired: list[int] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    visible_seen: list[int] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    started: int = 0

    def run(self, arrivals: list[int]) -> Simulator:
        for tick, count in enumerate(arrivals):
            now = tick * self.tick_seconds
            self.queue.extend([now] * count)
            ready = [t for t in self.starting if t <= now]
            if ready:
                self.running += len(ready)
                self.starting = [t for t in self.starting if t > now]
                self.last_ready = now
            if self.queue or self.in_flight:
                self.last_work = now
            oldest = now - self.queue[0] if self.queue else 0.0
            lane = LaneSignals(len(self.queue), self.in_flight, oldest)
            decision = decide(
                self.policy,
                ScalingSignals(
                    lanes={"realtime": lane, "batch": LaneSignals()},
                    running=self.running,
                    starting=len(self.starting),
                    idle_seconds=now - self.last_work,
                    since_scale_out_seconds=now - self.last_scale_out,
                    since_scale_in_seconds=now - self.last_down,
                    since_ready_seconds=now - self.last_ready,
                ),
            )
            self.visible_seen.append(len(self.queue))
            self._apply(decision, now)
            self.timeline.append(
                {
                    "t": now,
                    "visible": len(self.queue),
                    "in_flight": self.in_flight,
                    "oldest_age_seconds": oldest,
                    "running": self.running,
                    "starting": len(self.starting),
                    "desired": decision.desired,
                }
            )
            self.in_flight = min(len(self.queue), int(self.running * self.per_worker))
            for _ in range(self.in_flight):
                self.queue.popleft()
        return self

    def _apply(self, decision: Decision, now: float) -> None:
        workers = self.running + len(self.starting)
        if decision.desired > workers:
            new = decision.desired - workers
            at = [now + self.start_ticks * self.tick_seconds] * new
            if workers == 0 and self.standby_ticks is not None:
                at[0] = now + self.standby_ticks * self.tick_seconds
            self.starting += at
            self.started += new
        elif decision.desired < workers:
            stop = workers - decision.desired
            unstarted = min(stop, len(self.starting))
            self.starting = self.starting[unstarted:]
            self.running -= stop - unstarted
            self.last_down = now
        if decision.starts_scale_out_cooldown:
            self.last_scale_out = now
        self.desired.append(decision.desired)
        self.decisions.append(decision)

    @property
    def changes(self) -> int:
        return sum(1 for a, b in itertools.pairwise([0, *self.desired]) if a != b)

    @property
    def scale_ins(self) -> int:
        return sum(1 for a, b in itertools.pairwise([0, *self.desired]) if b < a)
