"""The local autoscaler: what ECS service scaling does in the cloud, played by the
supervisor with the same rule.

In the cloud, alarms on the queues' metrics drive each worker service's scaling
(``stacks/compute.py``). Locally the supervisor applies the rule itself,
:func:`switchyard.scaling.decide`: every :data:`TICK_SECONDS`, per worker service,
it reads the queues of the models the service serves, counts its workers, decides
and acts. A model with a service of its own is the service (named after it); a
pool's service serves every model that names the pool, and is scaled on the sum of
their work (:func:`summed`: visible and in-flight messages added up per lane, the
oldest message the oldest of all), with the same rule.

- Signals (:class:`SqsQueueSignals`): visible and in-flight messages from each
  queue's attributes (GetQueueAttributes), and the age of its oldest message from
  CloudWatch (``AWS/SQS ApproximateAgeOfOldestMessage``), as in AWS: SQS has no
  attribute for it. The local emulator answers that metric live from its SQS
  backend (``switchyard_local.sqs_metrics``).
- Workers (:class:`Workers`, the supervisor's ``WorkerPool``): a worker is
  ``running`` (capacity) once it has written its ready file, which it does after
  its models are loaded, and ``starting`` before; nothing stops a worker for
  being slow to start. Surplus workers get SIGTERM: they finish the batch in hand,
  release what they have not started, and exit (``draining``, counted as neither).
  A worker that dies unasked is replaced by the pool, as ECS replaces a stopped
  task: that is not a scale-in, and the count the policy sees does not drop.
- Bookkeeping: when a lane last had work (the idle time), when the count last went
  up and down (the cool-downs), when the newest running worker became ready.

Each decision that changes the count is a JSON line in the autoscaler's log with
its inputs and reason (holds too, every :data:`HOLD_LOG_SECONDS`), naming its
``service`` (and ``model`` for a model's own, ``pool`` and ``models`` for a pool's);
the worker counts are EMF documents in the same log (``DesiredWorkers``,
``RunningWorkers``, ``StartingWorkers``, dimension ``model``, or ``pool`` for a
pool) whenever they change and every :data:`METRICS_SECONDS`; and every tick writes
the current state to a JSON file (``scaling.json`` in the run folder, replaced
atomically) for whoever watches: each service's (``services``), and each model's
(``models``: its service's workers and decisions beside its own queues).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from switchyard.overflow import oldest_ages, queue_name
from switchyard.scaling import Decision, LaneSignals, ScalingPolicy, ScalingSignals, decide
from switchyard.telemetry import COUNT, metrics_document

TICK_SECONDS = 1.0  # how often the autoscaler reads the queues and decides
HOLD_LOG_SECONDS = 30.0  # a service's holds are logged at most this often
METRICS_SECONDS = 10.0  # worker counts are emitted at least this often
_COUNTS = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")


class QueueSignals(Protocol):
    """Each model's lanes, as its queues report them: model -> lane -> signals."""

    def read(self) -> dict[str, dict[str, LaneSignals]]: ...


@dataclass(frozen=True)
class WorkerCounts:
    """One service's workers: ``running`` are ready to serve (a model's own have
    loaded its versions), ``starting`` are not yet, ``draining`` were asked to stop and
    have not exited. ``last_ready_at`` (wall-clock seconds) is when the newest running
    one became capacity."""

    running: int = 0
    starting: int = 0
    draining: int = 0
    last_ready_at: float | None = None


class Workers(Protocol):
    """A service's worker processes, as the autoscaler drives them (ECS's tasks)."""

    def counts(self, service: str) -> WorkerCounts: ...

    def start(self, service: str, count: int) -> list[str]:
        """Start ``count`` new workers; their names."""
        ...

    def stop(self, service: str, count: int) -> list[str]:
        """Ask ``count`` workers to drain and exit (SIGTERM); their names."""
        ...


class SqsQueueSignals:
    """Queue signals from SQS and CloudWatch: counts from GetQueueAttributes, the
    age of the oldest message from CloudWatch's ``AWS/SQS`` metric (in AWS a minute
    or so behind; the local emulator answers it live)."""

    def __init__(self, sqs: Any, cloudwatch: Any, queues: Mapping[str, Mapping[str, str]]) -> None:
        self._sqs = sqs
        self._cloudwatch = cloudwatch
        self._queues = {model: dict(lanes) for model, lanes in queues.items()}

    def read(self) -> dict[str, dict[str, LaneSignals]]:
        ages = self.oldest_ages()
        out: dict[str, dict[str, LaneSignals]] = {}
        for model, lanes in self._queues.items():
            out[model] = {}
            for lane, url in lanes.items():
                attributes = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=_COUNTS)[
                    "Attributes"
                ]
                out[model][lane] = LaneSignals(
                    visible=int(attributes[_COUNTS[0]]),
                    in_flight=int(attributes[_COUNTS[1]]),
                    oldest_age_seconds=ages.get(queue_name(url), 0.0),
                )
        return out

    def oldest_ages(self) -> dict[str, float]:
        """Queue name -> seconds since its oldest message was sent (the newest
        datapoint of the last five minutes; 0 where there is none)."""
        names = [queue_name(url) for lanes in self._queues.values() for url in lanes.values()]
        return oldest_ages(self._cloudwatch, names)


def summed(lanes: Iterable[Mapping[str, LaneSignals]]) -> dict[str, LaneSignals]:
    """The lanes of several models as one service's: per lane, the visible and the
    in-flight messages added up, and the oldest message the oldest of all."""
    out: dict[str, LaneSignals] = {}
    for model_lanes in lanes:
        for lane, signals in model_lanes.items():
            before = out.get(lane, LaneSignals())
            out[lane] = LaneSignals(
                visible=before.visible + signals.visible,
                in_flight=before.in_flight + signals.in_flight,
                oldest_age_seconds=max(before.oldest_age_seconds, signals.oldest_age_seconds),
            )
    return out


class WarmFloorTooHigh(ValueError):
    """More warm workers asked for than a service's maximum allows."""


def local_policy(
    policy: ScalingPolicy, min_workers: int = 0, idle_seconds: float | None = None
) -> ScalingPolicy:
    """A service's policy as the local platform runs it: at least ``min_workers``
    warm (``switchyard up --min-workers``) and, if given, a shorter idle time
    (``SWITCHYARD_IDLE_SECONDS``). Raises WarmFloorTooHigh if the floor is above
    the service's maximum."""
    changes: dict[str, Any] = {}
    if min_workers > policy.min_tasks:
        if min_workers > policy.max_tasks:
            raise WarmFloorTooHigh(
                f"{min_workers} warm workers asked for, above the maximum of {policy.max_tasks}"
            )
        changes["min_tasks"] = min_workers
    if idle_seconds is not None:
        changes["idle_seconds"] = idle_seconds
    return dataclasses.replace(policy, **changes)


@dataclass
class _Service:
    """What the autoscaler remembers of one worker service between ticks."""

    policy: ScalingPolicy
    models: tuple[str, ...]
    pool: bool
    last_work: float  # monotonic: when a lane last had a visible or in-flight message
    last_scale_out: float = -math.inf
    last_scale_in: float = -math.inf
    last_logged: float = -math.inf
    last_emitted: float = -math.inf
    emitted: tuple[int, int, int] | None = None
    desired: int = 0
    lanes: dict[str, LaneSignals] = field(default_factory=dict)
    counts: WorkerCounts = WorkerCounts()
    idle_seconds: float = 0.0
    last_decision: dict[str, Any] | None = None
    last_change: dict[str, Any] | None = None


class Autoscaler:
    """Reads the queues, applies :func:`decide` per worker service, starts and stops
    workers, and records why. :meth:`tick` is one round; :meth:`run` a round every
    :data:`TICK_SECONDS`, on the supervisor's autoscaler thread.

    ``policies`` is each service's policy; ``pools`` each pool's models (a service not
    named there is a model's own, serving the model it is named after)."""

    def __init__(
        self,
        policies: Mapping[str, ScalingPolicy],
        signals: QueueSignals,
        workers: Workers,
        log: IO[str],
        state_path: Path | None = None,
        announce: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        pools: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._signals = signals
        self._workers = workers
        self._log = log
        self._state_path = state_path
        self._announce = announce
        self._clock = clock
        self._wall = wall_clock
        now = clock()
        pools = pools or {}
        self._services = {
            service: _Service(
                policy,
                models=tuple(pools.get(service, (service,))),
                pool=service in pools,
                last_work=now,
            )
            for service, policy in policies.items()
        }
        self._model_lanes: dict[str, dict[str, LaneSignals]] = {}
        self._read_failing = False
        self._log_lock = threading.Lock()  # notes come from the supervisor's thread

    def tick(self) -> dict[str, Decision]:
        """One round for every service: read, decide, act, record. A failed read of
        the queues (the emulator busy or gone) skips the round: nothing is decided
        blind."""
        try:
            lanes_by_model = self._signals.read()
        except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
            if not self._read_failing:
                self._write({"message": "queue signals unavailable", "error": repr(exc)})
            self._read_failing = True
            return {}
        if self._read_failing:
            self._write({"message": "queue signals available again"})
            self._read_failing = False
        self._model_lanes = {model: dict(lanes) for model, lanes in lanes_by_model.items()}
        decisions = {
            service: self._decide_and_act(
                service, state, summed(lanes_by_model.get(m, {}) for m in state.models)
            )
            for service, state in self._services.items()
        }
        self._write_state()
        return decisions

    def run(self, stop: threading.Event) -> None:
        """A round every :data:`TICK_SECONDS` until ``stop`` is set (the supervisor's
        autoscaler thread). A round that fails is logged and the next one runs."""
        while not stop.wait(TICK_SECONDS):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - scaling must outlive one bad round
                self._write(
                    {
                        "message": "scaling round failed",
                        "error": repr(exc),
                        "traceback": traceback.format_exc(),
                    }
                )

    def note(self, service: str, message: str, **fields: Any) -> None:
        """A worker event worth keeping beside the decisions (replaced, stopped)."""
        self._write({"message": message, **self._names(service), **fields})

    def state(self) -> dict[str, Any]:
        """Every service's current figures and last decisions, and every model's: its
        service's, beside its own queues (``scaling.json``)."""
        services = {name: self._service_state(state) for name, state in self._services.items()}
        models = {}
        for name, state in self._services.items():
            for model in state.models:
                lanes = self._model_lanes.get(model, {})
                models[model] = {
                    **services[name],
                    "service": name,
                    "lanes": {lane: _lane(signals) for lane, signals in lanes.items()},
                }
        return {
            "updated_at": round(self._wall(), 3),
            "tick_seconds": TICK_SECONDS,
            "services": services,
            "models": models,
        }

    def _names(self, service: str) -> dict[str, Any]:
        """How a record names a service: ``model`` for a model's own, ``pool`` and its
        ``models`` for a pool's; ``service`` for both."""
        state = self._services.get(service)
        if state is not None and state.pool:
            return {"service": service, "pool": service, "models": list(state.models)}
        return {"service": service, "model": service}

    # -- one service -------------------------------------------------------------

    def _decide_and_act(
        self, service: str, state: _Service, lanes: Mapping[str, LaneSignals]
    ) -> Decision:
        now = self._clock()
        state.lanes = dict(lanes)
        if any(lane.visible or lane.in_flight for lane in lanes.values()):
            state.last_work = now
        state.idle_seconds = now - state.last_work
        counts = self._workers.counts(service)
        signals = ScalingSignals(
            lanes=state.lanes,
            running=counts.running,
            starting=counts.starting,
            idle_seconds=state.idle_seconds,
            since_scale_out_seconds=now - state.last_scale_out,
            since_scale_in_seconds=now - state.last_scale_in,
            since_ready_seconds=(
                math.inf
                if counts.last_ready_at is None
                else max(0.0, self._wall() - counts.last_ready_at)
            ),
        )
        decision = decide(state.policy, signals)
        current = signals.workers
        started: list[str] = []
        stopped: list[str] = []
        if decision.desired > current:
            started = self._workers.start(service, decision.desired - current)
            if decision.starts_scale_out_cooldown:  # a wake from zero does not
                state.last_scale_out = now
        elif decision.desired < current:
            stopped = self._workers.stop(service, current - decision.desired)
            state.last_scale_in = now
        state.desired = decision.desired
        state.counts = counts
        record = {
            "at": round(self._wall(), 3),
            **self._names(service),
            "action": decision.action,
            "workers": current,
            "desired": decision.desired,
            "reason": decision.reason,
            "inputs": _inputs(signals, counts),
        }
        state.last_decision = record
        if decision.desired != current:
            record = {**record, "started": started, "stopped": stopped}
            state.last_change = record
            self._announce(
                f"SCALE {service} {current} -> {decision.desired} ({decision.action}): "
                f"{decision.reason}"
            )
        if decision.desired != current or now - state.last_logged >= HOLD_LOG_SECONDS:
            self._write({"message": "scaling decision", **record, "policy": _policy(state.policy)})
            state.last_logged = now
        self._emit(service, state, now, decision.desired, counts)
        return decision

    def _emit(
        self, service: str, state: _Service, now: float, desired: int, counts: WorkerCounts
    ) -> None:
        figures = (desired, counts.running, counts.starting)
        if figures == state.emitted and now - state.last_emitted < METRICS_SECONDS:
            return
        document = metrics_document(
            {
                "DesiredWorkers": (COUNT, desired),
                "RunningWorkers": (COUNT, counts.running),
                "StartingWorkers": (COUNT, counts.starting),
            },
            **{"pool" if state.pool else "model": service},
        )
        with self._log_lock:
            self._log.write(json.dumps(document, separators=(",", ":")) + "\n")
            self._log.flush()
        state.emitted, state.last_emitted = figures, now

    # -- records -----------------------------------------------------------------

    def _service_state(self, state: _Service) -> dict[str, Any]:
        return {
            "models": list(state.models),
            "pool": state.pool,
            "workers": {
                "running": state.counts.running,
                "starting": state.counts.starting,
                "desired": state.desired,
                "draining": state.counts.draining,
            },
            "lanes": {lane: _lane(signals) for lane, signals in state.lanes.items()},
            "idle_seconds": round(state.idle_seconds, 1),
            "policy": _policy(state.policy),
            "last_decision": state.last_decision,
            "last_change": state.last_change,
        }

    def _write(self, fields: dict[str, Any]) -> None:
        stamp = dt.datetime.fromtimestamp(self._wall(), dt.UTC).isoformat(timespec="milliseconds")
        with self._log_lock:
            self._log.write(json.dumps({"timestamp": stamp, **fields}) + "\n")
            self._log.flush()

    def _write_state(self) -> None:
        if self._state_path is None:
            return
        staged = self._state_path.with_name(f".{self._state_path.name}.tmp")
        staged.write_text(json.dumps(self.state(), indent=2) + "\n")
        os.replace(staged, self._state_path)  # readers see the old file or the new one


def _seconds(value: float) -> float | None:
    """Seconds for JSON: rounded; None for an event that never happened."""
    return None if math.isinf(value) else round(value, 1)


def _lane(signals: LaneSignals) -> dict[str, Any]:
    return {
        "visible": signals.visible,
        "in_flight": signals.in_flight,
        "oldest_age_seconds": round(signals.oldest_age_seconds, 1),
    }


def _inputs(signals: ScalingSignals, counts: WorkerCounts) -> dict[str, Any]:
    return {
        "running": signals.running,
        "starting": signals.starting,
        "draining": counts.draining,
        "lanes": {lane: _lane(lane_signals) for lane, lane_signals in signals.lanes.items()},
        "idle_seconds": _seconds(signals.idle_seconds),
        "since_scale_out_seconds": _seconds(signals.since_scale_out_seconds),
        "since_scale_in_seconds": _seconds(signals.since_scale_in_seconds),
        "since_ready_seconds": _seconds(signals.since_ready_seconds),
    }


def _policy(policy: ScalingPolicy) -> dict[str, Any]:
    return dataclasses.asdict(policy)
