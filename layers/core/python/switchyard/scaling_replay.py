"""A day of traffic replayed through the scaling rule, for ``switchyard plan``: how
long requests wait in the queue for a worker, and how many worker-hours the rule
spends on them, idle ones included.

One worker service (a model's own, or a pool's) is ticked through the day:

- **Arrivals.** Each tick brings the requests its rate asks for: a Poisson draw
  (seeded, so a replay is repeatable) or exactly the rate (``even``), spread evenly
  over the tick.
- **The queue.** First in, first out, served by the running workers at
  ``worker_rps`` each, as a fluid: a request waits from its arrival until a worker
  has worked through everything before it. A worker still starting serves nothing.
- **The rule.** Every ``decide_every_seconds`` the service's signals go to
  :func:`switchyard.scaling.decide` with its :class:`~switchyard.scaling.ScalingPolicy`:
  the visible backlog, the messages in flight (what the workers hold: their rate of
  taking messages times one batch's time), the age of the oldest message, the
  workers running and starting, and the times since the last work, scale-out,
  scale-in and worker ready. More workers wanted: they start and serve after
  ``start_delay_seconds``; fewer: starting ones are stopped first, then running ones.
- **The bill.** Every worker started or running is paid for; its busy time is the
  requests it took over its rate, the rest of its time is idle.

A warm-up (a day, by default) runs first so that the measured day begins where the
day before left it. What a fluid leaves out: the milliseconds a request spends in
a forming batch and in the model, and queueing noise within a tick; what it keeps
is the waiting that scaling causes, which is seconds to minutes.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from switchyard.scaling import LaneSignals, ScalingPolicy, ScalingSignals, decide

Arrivals = Literal["poisson", "even"]
DAY_SECONDS = 86_400


@dataclass(frozen=True)
class ReplaySettings:
    """How the day is ticked."""

    start_delay_seconds: float
    tick_seconds: float = 10.0
    decide_every_seconds: float = 60.0
    warmup_seconds: float = DAY_SECONDS
    arrivals: Arrivals = "poisson"
    seed: int = 1

    def __post_init__(self) -> None:
        if self.tick_seconds <= 0 or DAY_SECONDS % self.tick_seconds:
            raise ValueError(f"tick_seconds ({self.tick_seconds}) must divide a day")
        if self.decide_every_seconds % self.tick_seconds:
            raise ValueError(
                f"decide_every_seconds ({self.decide_every_seconds}) must be a whole number "
                f"of ticks ({self.tick_seconds} s)"
            )

    @property
    def day_ticks(self) -> int:
        return int(DAY_SECONDS // self.tick_seconds)


@dataclass(frozen=True)
class ServiceLoad:
    """What one worker service is asked to do over a day: its arrival rate
    (requests/s) in each tick, what one worker takes (requests/s, a number or one per
    tick for a pool whose mix of models moves), one batch's time, and its policy."""

    rates: Sequence[float]
    worker_rps: float | Sequence[float]
    batch_seconds: float
    policy: ScalingPolicy


@dataclass
class WaitDistribution:
    """Queue waits weighted by requests: point masses at one wait, and runs of
    requests whose waits spread evenly between two (a backlog draining)."""

    points: dict[float, float] = field(default_factory=dict)  # wait -> requests
    spreads: list[tuple[float, float, float]] = field(default_factory=list)  # (requests, lo, hi)

    def add(self, requests: float, first: float, last: float) -> None:
        if requests <= 0:
            return
        lo, hi = max(0.0, min(first, last)), max(0.0, first, last)
        if hi - lo < 1e-9:
            self.points[lo] = self.points.get(lo, 0.0) + requests
        else:
            self.spreads.append((requests, lo, hi))

    @property
    def requests(self) -> float:
        return sum(self.points.values()) + sum(m for m, _, _ in self.spreads)

    def mean(self) -> float:
        total = self.requests
        if not total:
            return 0.0
        weighted = sum(w * m for w, m in self.points.items())
        weighted += sum(m * (lo + hi) / 2 for m, lo, hi in self.spreads)
        return weighted / total

    def maximum(self) -> float:
        return max([*self.points, *(hi for _, _, hi in self.spreads)], default=0.0)

    def quantile(self, q: float) -> float:
        """The wait that ``q`` of the requests wait no longer than."""
        total = self.requests
        if not total:
            return 0.0
        target = q * total
        # A sweep over the waits: point masses, and each spread's density between its ends.
        events: dict[float, list[float]] = {}  # wait -> [point mass, slope change]
        for w, m in self.points.items():
            events.setdefault(w, [0.0, 0.0])[0] += m
        for m, lo, hi in self.spreads:
            density = m / (hi - lo)
            events.setdefault(lo, [0.0, 0.0])[1] += density
            events.setdefault(hi, [0.0, 0.0])[1] -= density
        done, slope, previous = 0.0, 0.0, 0.0
        for w in sorted(events):
            if slope > 0 and done + slope * (w - previous) >= target:
                return previous + (target - done) / slope
            done += slope * (w - previous)
            mass, change = events[w]
            done += mass
            if done >= target - 1e-9 * total:
                return w
            slope += change
            previous = w
        return self.maximum()

    @classmethod
    def merged(cls, parts: Iterable[WaitDistribution]) -> WaitDistribution:
        out = cls()
        for part in parts:
            for w, m in part.points.items():
                out.points[w] = out.points.get(w, 0.0) + m
            out.spreads.extend(part.spreads)
        return out


@dataclass
class ReplayResult:
    """The measured day of one service."""

    arrived: float = 0.0
    served: float = 0.0
    worker_seconds: float = 0.0  # running or starting: paid for
    busy_seconds: float = 0.0  # serving requests
    peak_workers: int = 0
    wakes: int = 0
    scale_outs: int = 0
    scale_ins: int = 0
    unserved: float = 0.0  # still queued when the day ends
    waits: WaitDistribution = field(default_factory=WaitDistribution)

    @property
    def worker_hours(self) -> float:
        return self.worker_seconds / 3600

    @property
    def idle_hours(self) -> float:
        return max(0.0, self.worker_seconds - self.busy_seconds) / 3600


@dataclass
class _Piece:
    """Requests that arrived evenly, still queued: how many, when the first of them
    arrived, how many arrived a second, and whether they count (the measured day)."""

    left: float
    first_at: float
    rate: float
    measured: bool


def replay(load: ServiceLoad, settings: ReplaySettings, name: str = "") -> ReplayResult:
    """Tick ``load`` through the warm-up and one measured day (see the module's
    docstring); ``name`` seeds the arrivals, so that each service draws its own."""
    policy = load.policy
    dt = settings.tick_seconds
    day = settings.day_ticks
    if len(load.rates) != day:
        raise ValueError(f"rates: {len(load.rates)} ticks given, a day has {day}")
    worker_rps = (
        [float(load.worker_rps)] * day
        if isinstance(load.worker_rps, int | float)
        else list(load.worker_rps)
    )
    if len(worker_rps) != day or min(worker_rps) <= 0:
        raise ValueError("worker_rps: one positive figure, or one per tick of the day")
    warmup = math.ceil(settings.warmup_seconds / dt)
    per_decision = round(settings.decide_every_seconds / dt)
    rng = random.Random(f"{settings.seed}:{name}")
    poisson = settings.arrivals == "poisson"

    result = ReplayResult()
    queue: deque[_Piece] = deque()
    backlog = 0.0
    running = policy.min_tasks
    starting: deque[float] = deque()  # when each starting worker is ready
    last_work = last_ready = last_out = last_in = -math.inf
    no_wait = 0.0  # requests of the measured day served as they arrived
    arrived = served = busy = paid = 0.0  # the measured day's
    peak = 0
    means = [max(0.0, rate * dt) for rate in load.rates]
    spreads = [math.sqrt(mean) for mean in means]
    gauss = rng.gauss
    batch_seconds = load.batch_seconds

    for k in range(warmup + day):
        t = k * dt
        measured = k >= warmup
        while starting and starting[0] <= t:
            starting.popleft()
            running += 1
            last_ready = t
        mu = worker_rps[k % day]
        mean = means[k % day]
        if not poisson:
            arrivals = mean
        elif mean >= 30:  # a rounded normal: the difference from Poisson's is noise here
            arrivals = float(round(mean + spreads[k % day] * gauss()))
            if arrivals < 0:
                arrivals = 0.0
        else:
            arrivals = _poisson(rng, mean)
        rate_in = arrivals / dt
        capacity = running * mu  # requests/s
        departed = 0.0

        if capacity <= 0:
            if arrivals:
                queue.append(_Piece(arrivals, t, rate_in, measured))
        elif backlog <= 0 and capacity >= rate_in:
            departed = arrivals  # served as they arrive
            if measured:
                no_wait += arrivals
        else:
            if arrivals:
                queue.append(_Piece(arrivals, t, rate_in, measured))
            clears = backlog / (capacity - rate_in) if capacity > rate_in else math.inf
            if clears < dt:
                departed = _depart(queue, capacity * clears, t, capacity, result.waits)
                # the rest of the tick's arrivals are taken as they come
                rest = sum(p.left for p in queue)
                no_wait += sum(p.left for p in queue if p.measured)
                queue.clear()
                departed += rest
            else:
                departed = _depart(queue, capacity * dt, t, capacity, result.waits)
        backlog = max(0.0, backlog + arrivals - departed)
        if backlog <= 1e-9:
            backlog = 0.0
            queue.clear()

        workers = running + len(starting)
        if measured:
            arrived += arrivals
            served += departed
            busy += departed / mu
            paid += workers
            if workers > peak:
                peak = workers

        end = t + dt
        visible = round(backlog)
        in_flight = math.ceil(departed / dt * batch_seconds) if departed > 0 else 0
        if visible or in_flight:
            last_work = end
        if (k + 1) % per_decision:
            continue
        oldest = end - queue[0].first_at if visible and queue else 0.0
        decision = decide(
            policy,
            ScalingSignals(
                lanes={"realtime": LaneSignals(visible, in_flight, oldest)},
                running=running,
                starting=len(starting),
                idle_seconds=end - last_work,
                since_scale_out_seconds=end - last_out,
                since_scale_in_seconds=end - last_in,
                since_ready_seconds=end - last_ready,
            ),
        )
        if decision.starts_scale_out_cooldown:
            last_out = end
        if decision.desired > workers:
            starting.extend([end + settings.start_delay_seconds] * (decision.desired - workers))
        elif decision.desired < workers:
            last_in = end
            stop = workers - decision.desired
            while stop and starting:
                starting.pop()
                stop -= 1
            running -= stop
        if measured and decision.desired != workers:
            if decision.action == "wake":
                result.wakes += 1
            elif decision.desired > workers:
                result.scale_outs += 1
            else:
                result.scale_ins += 1

    result.arrived, result.served, result.busy_seconds = arrived, served, busy
    result.worker_seconds, result.peak_workers = paid * dt, peak
    result.waits.add(no_wait, 0.0, 0.0)
    # What is still queued at the end waited at least until then.
    end = (warmup + day) * dt
    for piece in queue:
        if piece.measured:
            last = piece.first_at + piece.left / piece.rate
            result.waits.add(piece.left, end - piece.first_at, end - last)
            result.unserved += piece.left
    return result


def _depart(
    queue: deque[_Piece], count: float, start: float, rate: float, waits: WaitDistribution
) -> float:
    """Take ``count`` requests off the front of ``queue`` at ``rate`` a second from
    ``start``, recording each run's waits; returns how many were taken."""
    taken = 0.0
    while queue and count - taken > 1e-9:
        piece = queue[0]
        n = min(piece.left, count - taken)
        leaves = start + taken / rate
        first_wait = leaves - piece.first_at
        last_wait = first_wait + n * (1 / rate - 1 / piece.rate)
        if piece.measured:
            waits.add(n, first_wait, last_wait)
        piece.left -= n
        piece.first_at += n / piece.rate
        taken += n
        if piece.left <= 1e-9:
            queue.popleft()
    return taken


def _poisson(rng: random.Random, mean: float) -> float:
    """A Poisson draw for a small mean (Knuth's); a large one is drawn as a rounded
    normal in the loop."""
    if mean <= 0:
        return 0.0
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return float(k)
