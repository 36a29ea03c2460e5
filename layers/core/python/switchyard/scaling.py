"""How many workers a model wants: one pure policy for both substrates.

The local supervisor calls :func:`decide` every few seconds with what it reads
from the queues and its own processes; the CDK app renders the same rule into
ECS scaling (metric-math alarms and step scaling, ``stacks/compute.py``), and an
infra test evaluates those alarms and steps on the scenarios the unit tests give
:func:`decide` and checks that both land on the same desired count.

``workers`` below is running + starting: a worker still loading its models is
capacity on the way, so a slow start is waited for, never answered with more
starts (and never stopped for being slow). The rule, first match wins:

1. **Wake.** Work waiting (visible or in flight, any lane) and no worker → what the
   backlog asks for, at least one and at least the minimum, at once: no cool-down,
   and it starts none. A request at zero waits in the queue for this worker; a
   backlog that arrives just after it (one request wakes the model, a burst
   follows) is the scale-out's to answer at once, not a minute later.
2. **Bounds.** Fewer workers than the stage's minimum → the minimum; more than the
   maximum → the maximum.
3. **Scale out.** The backlog (visible messages of both lanes) asks for
   ``ceil(backlog / backlog_per_task)`` workers; a queue whose oldest message is
   older than ``target_age_seconds`` although every worker has been running for
   that long (none starting, the last one ready ``target_age_seconds`` ago) asks
   for one more than there are: the workers are slower than the backlog per task
   says. A message that aged while workers started is no such sign. Capped at the
   maximum; at most once per ``scale_out_cooldown_seconds``, counted from the last
   scale-out (:attr:`Decision.starts_scale_out_cooldown`: a wake is not one).
4. **Scale in.** Nothing visible and nothing in flight for ``idle_seconds`` → the
   minimum (zero in dev), at most once per ``scale_in_cooldown_seconds``. A model
   with work keeps its workers, however few messages it has: shrinking under load
   is what makes a policy flap.
5. Otherwise hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Action = Literal["wake", "raise_to_minimum", "lower_to_maximum", "scale_out", "scale_in", "hold"]


@dataclass(frozen=True)
class ScalingPolicy:
    """One model's scaling settings in one stage (``Manifest.scaling_policy``)."""

    min_tasks: int
    max_tasks: int
    backlog_per_task: int
    target_age_seconds: float
    scale_out_cooldown_seconds: float
    scale_in_cooldown_seconds: float
    idle_seconds: float

    def __post_init__(self) -> None:
        if self.max_tasks < 1:
            raise ValueError(f"max_tasks ({self.max_tasks}) must be at least 1")
        if not 0 <= self.min_tasks <= self.max_tasks:
            raise ValueError(
                f"min_tasks ({self.min_tasks}) must be between 0 and max_tasks ({self.max_tasks})"
            )
        if self.backlog_per_task < 1:
            raise ValueError(f"backlog_per_task ({self.backlog_per_task}) must be at least 1")
        for name in (
            "target_age_seconds",
            "scale_out_cooldown_seconds",
            "scale_in_cooldown_seconds",
            "idle_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} ({getattr(self, name)}) must not be negative")

    def wanted_for_backlog(self, visible: int) -> int:
        """Workers a backlog of ``visible`` messages asks for, before the bounds."""
        return math.ceil(visible / self.backlog_per_task)


@dataclass(frozen=True)
class LaneSignals:
    """One queue, as SQS reports it (ApproximateNumberOfMessages... attributes)."""

    visible: int = 0
    in_flight: int = 0
    oldest_age_seconds: float = 0.0


@dataclass(frozen=True)
class ScalingSignals:
    """What a decision reads. Times are seconds since the event; ``math.inf`` for
    one that never happened."""

    lanes: Mapping[str, LaneSignals]
    running: int  # workers whose models are loaded: capacity
    starting: int  # workers started and still loading: capacity on the way
    idle_seconds: float  # since a lane last had a visible or in-flight message
    # since the last decision that started the scale-out cool-down (a scale-out:
    # Decision.starts_scale_out_cooldown); a wake from zero starts none
    since_scale_out_seconds: float = math.inf
    since_scale_in_seconds: float = math.inf  # since the desired count last went down
    since_ready_seconds: float = math.inf  # since the last worker became capacity

    @property
    def visible(self) -> int:
        return sum(lane.visible for lane in self.lanes.values())

    @property
    def in_flight(self) -> int:
        return sum(lane.in_flight for lane in self.lanes.values())

    @property
    def oldest_age_seconds(self) -> float:
        return max((lane.oldest_age_seconds for lane in self.lanes.values()), default=0.0)

    @property
    def workers(self) -> int:
        return self.running + self.starting


@dataclass(frozen=True)
class Decision:
    """The desired worker count, which rule set it, and why, in words."""

    desired: int
    action: Action
    reason: str

    @property
    def changes(self) -> bool:
        return self.action != "hold"

    @property
    def starts_scale_out_cooldown(self) -> bool:
        """Whether whoever applies this decision counts the scale-out cool-down from
        now (``ScalingSignals.since_scale_out_seconds``). Only a scale-out does: a
        wake sized its workers for the backlog of one moment, and the backlog that
        follows it must not wait out a cool-down for the next; the cloud renders the
        wake as a policy of its own, with none (``stacks/compute.py``)."""
        return self.action == "scale_out"


def decide(policy: ScalingPolicy, signals: ScalingSignals) -> Decision:
    """The number of workers ``policy`` wants given ``signals``, and why."""
    current = signals.workers
    visible, in_flight = signals.visible, signals.in_flight
    work = visible + in_flight
    for_backlog = policy.wanted_for_backlog(visible)

    # 1. Wake
    if current == 0 and work > 0:
        desired = min(max(1, policy.min_tasks, for_backlog), policy.max_tasks)
        return Decision(
            desired, "wake", f"{work} messages waiting and no worker: start {desired} now"
        )
    # 2. Bounds
    if current < policy.min_tasks:
        return Decision(
            policy.min_tasks,
            "raise_to_minimum",
            f"{current} workers, below the stage's minimum of {policy.min_tasks}",
        )
    if current > policy.max_tasks:
        return Decision(
            policy.max_tasks,
            "lower_to_maximum",
            f"{current} workers, above the maximum of {policy.max_tasks}",
        )

    # 3. Scale out
    wanted = for_backlog
    why = f"backlog {visible} at {policy.backlog_per_task} per worker wants {wanted}"
    age = signals.oldest_age_seconds
    settled = signals.starting == 0 and signals.since_ready_seconds >= policy.target_age_seconds
    if visible and age > policy.target_age_seconds and settled and wanted <= current:
        wanted = current + 1
        why = (
            f"oldest message {age:.0f} s old, over the target of "
            f"{policy.target_age_seconds:.0f} s, with every worker running: one more"
        )
    if wanted > current:
        if current == policy.max_tasks:
            return Decision(current, "hold", f"{why}, but {current} is the maximum")
        wanted = min(wanted, policy.max_tasks)
        if signals.since_scale_out_seconds < policy.scale_out_cooldown_seconds:
            return Decision(
                current,
                "hold",
                f"{why}, but the last scale-out was {signals.since_scale_out_seconds:.0f} s "
                f"ago (cool-down {policy.scale_out_cooldown_seconds:.0f} s)",
            )
        return Decision(wanted, "scale_out", f"{why}: {current} → {wanted}")

    # 4. Scale in
    if work == 0 and current > policy.min_tasks:
        if signals.idle_seconds < policy.idle_seconds:
            return Decision(
                current,
                "hold",
                f"idle for {signals.idle_seconds:.0f} s of {policy.idle_seconds:.0f} s "
                "before scaling in",
            )
        if signals.since_scale_in_seconds < policy.scale_in_cooldown_seconds:
            return Decision(
                current,
                "hold",
                f"idle, but the last scale-in was {signals.since_scale_in_seconds:.0f} s ago "
                f"(cool-down {policy.scale_in_cooldown_seconds:.0f} s)",
            )
        return Decision(
            policy.min_tasks,
            "scale_in",
            f"no work for {signals.idle_seconds:.0f} s: {current} → {policy.min_tasks}",
        )

    # 5. Hold
    if work:
        return Decision(current, "hold", f"{why}; {current} workers on {work} messages")
    return Decision(current, "hold", f"no work; {current} workers at the minimum")
