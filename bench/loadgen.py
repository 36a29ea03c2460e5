"""An open-loop load generator: requests leave at Poisson arrival times whether or
not earlier ones have been answered, as independent clients would send them.

A closed loop (send, wait, send) slows down with the server and hides its queueing;
an open loop does not, so latency is measured from each request's *scheduled*
time, and a generator that falls behind is recorded (``send_lag``) rather than
silently forgiven. Every step is bounded: a fixed number of requests spread over a
fixed time, and a hard deadline after which whatever is still open is cancelled
and counted as a timeout. Targets are loopback addresses only.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx

from bench.common import percentile, wait_for_quiet
from bench.proc_cpu import CpuMeter

P99_LIMIT_MS = 500.0
DISTURBED_SHARE = 0.2
# Requests sent one at a time before a step that follows one not sustained.
RECOVERY_REQUESTS = 16
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# Sends one request; returns (HTTP status, parsed JSON body or None).
Sender = Callable[[httpx.AsyncClient, int], Awaitable[tuple[int, Any]]]


def poisson_schedule(rate: float, count: int, seed: int) -> list[float]:
    """Arrival offsets in seconds: ``count`` arrivals of a Poisson process at
    ``rate`` per second (exponential gaps), reproducible by ``seed``."""
    if rate <= 0 or count <= 0:
        return []
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def check_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK and not host.startswith("127."):
        raise ValueError(f"{url}: the load generator only targets loopback addresses")


@dataclass
class Outcome:
    kind: str  # ok | miss (202 past the deadline) | error | timeout
    latency_ms: float | None
    status: int | None = None
    body: Any = None


@dataclass
class StepResult:
    rate: float
    sent: int
    elapsed_s: float
    outcomes: list[Outcome] = field(default_factory=list)
    send_lag_ms_p99: float = 0.0

    def count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    @property
    def latencies(self) -> list[float]:
        return [o.latency_ms for o in self.outcomes if o.kind == "ok" and o.latency_ms is not None]

    @property
    def failures(self) -> int:
        return self.sent - self.count("ok")

    @property
    def throughput(self) -> float:
        return self.count("ok") / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def sustained(self) -> bool:
        return is_sustained(self.latencies, self.failures)

    def summary(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "rate": self.rate,
            "sent": self.sent,
            "ok": self.count("ok"),
            "miss_202": self.count("miss"),
            "errors": self.count("error"),
            "timeouts": self.count("timeout"),
            "throughput": round(self.throughput, 2),
            "p50_ms": round(percentile(lat, 50), 1),
            "p95_ms": round(percentile(lat, 95), 1),
            "p99_ms": round(percentile(lat, 99), 1),
            "max_ms": round(max(lat), 1) if lat else None,
            "send_lag_ms_p99": round(self.send_lag_ms_p99, 1),
            "sustained": self.sustained,
        }


def is_sustained(latencies_ms: Sequence[float], failures: int) -> bool:
    """Answered every request, and 99 % of them within the limit."""
    return failures == 0 and bool(latencies_ms) and percentile(latencies_ms, 99) < P99_LIMIT_MS


def sustainable_rate(steps: Sequence[dict[str, Any]]) -> float | None:
    """The highest tested rate that was sustained (None if none was)."""
    rates = [s["rate"] for s in steps if s["sustained"]]
    return max(rates) if rates else None


async def _step(
    url: str, send: Sender, rate: float, seconds: float, seed: int, timeout_s: float
) -> StepResult:
    count = max(1, round(rate * seconds))
    schedule = poisson_schedule(rate, count, seed)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    lags: list[float] = []
    loop = asyncio.get_running_loop()
    outcomes: list[Outcome | None] = [None] * count
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout_s) as client:
        start = loop.time() + 0.05
        last_done = [start]

        async def one(i: int, due: float) -> None:
            lags.append(max(loop.time() - due, 0.0) * 1000)
            try:
                status, body = await send(client, i)
            except httpx.TimeoutException:
                outcomes[i] = Outcome("timeout", None)
                return
            except Exception as exc:  # noqa: BLE001 - any failure is an error outcome
                outcomes[i] = Outcome("error", None, None, repr(exc))
                return
            now = loop.time()
            last_done[0] = max(last_done[0], now)
            kind = "ok" if status == 200 else "miss" if status == 202 else "error"
            outcomes[i] = Outcome(kind, (now - due) * 1000, status, body)

        tasks = []
        for i, offset in enumerate(schedule):
            due = start + offset
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due)))
        hard_deadline = start + schedule[-1] + timeout_s + 1
        _, pending = await asyncio.wait(tasks, timeout=max(hard_deadline - loop.time(), 0.1))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    final = [o or Outcome("timeout", None) for o in outcomes]
    elapsed = max(last_done[0] - start, schedule[-1])
    return StepResult(rate, count, elapsed, final, percentile(lags, 99) if lags else 0.0)


def run_step(
    url: str,
    send: Sender,
    rate: float,
    seconds: float,
    seed: int = 1,
    timeout_s: float = 15.0,
) -> StepResult:
    """One bounded step of ``rate`` requests/s for about ``seconds``."""
    check_loopback(url)
    return asyncio.run(_step(url, send, rate, seconds, seed, timeout_s))


def run_ladder(
    url: str,
    send: Sender,
    rates: Sequence[float],
    seconds: float,
    log: Callable[[str], None],
    pause_s: float = 1.0,
    keep: Callable[[StepResult], None] | None = None,
    meter: CpuMeter | None = None,
    retries: int = 2,
    settle: Callable[[], None] | None = None,
    refine: int = 2,
) -> list[dict[str, Any]]:
    """Steps of rising rate until one is not sustained twice running (kept too, as
    tried the second time: one slow moment of a shared machine puts a p99 over the
    limit), then up to ``refine`` steps that halve the gap between the highest rate
    sustained and the lowest not, while it is over a tenth: the rungs are coarse (60
    then 80), and the sustainable rate is read to within about 5 % of it. A refining
    step is confirmed the same way, as it decides the rate read. The steps come back
    in order of rate. With a ``meter``, each step also records the CPU each
    process spent per answered request, and a step that fails while other work took
    more than a fifth of the machine is run again (at most ``retries`` times, none:
    no confirming either) once the machine is quiet. A step run after one not
    sustained starts once the backlog that one left has drained (``settle``) and a
    few requests have gone through one at a time: the target's own notion of recent
    latency (the platform's router times its looks for a result by its recent
    answers: the last 64 of the last 5 s) would otherwise start the step from the
    overload."""
    steps: list[dict[str, Any]] = []
    cores = os.cpu_count() or 1

    def recover() -> None:
        if settle is not None:
            settle()
        run_sequential(url, send, RECOVERY_REQUESTS)

    def measured(rate: float, seed: int, confirm: bool) -> bool:
        for attempt in range(retries + 1):
            if meter is not None:
                meter.start()
            result = run_step(url, send, rate, seconds, seed=seed)
            summary = result.summary()
            summary["attempt"] = attempt + 1
            disturbed = False
            if meter is not None:
                used, others = meter.stop()
                ok = max(summary["ok"], 1)
                per_request = {k: round(1000 * v / ok, 2) for k, v in used.items()}
                summary["cpu_ms_per_request"] = per_request
                summary["cpu_ms_per_request_total"] = round(1000 * sum(used.values()) / ok, 2)
                busy = sum(used.values()) / (result.elapsed_s * cores)
                summary["cpu_busy_share"] = round(busy, 3)
                summary["others_busy_share"] = round(others / (result.elapsed_s * cores), 3)
                disturbed = summary["others_busy_share"] > DISTURBED_SHARE
            if result.sustained or attempt == retries:
                break
            if disturbed:
                # Another tenant of this shared machine took a share of it during the
                # step: the step says nothing about the target. Let the machine settle
                # and redo it.
                why = f"while other work used {summary['others_busy_share']:.0%} of the machine"
            elif confirm and attempt == 0:
                # One slow moment on a shared machine is enough to put p99 over the
                # limit: a rung of the ladder fails only when it fails twice running.
                why = f"(p99 {summary['p99_ms']} ms); once more to confirm"
            else:
                break
            log(f"  {rate:>6.1f} req/s: not sustained {why}; retrying")
            recover()
            if disturbed:
                wait_for_quiet(120, 1.5, log)
            time.sleep(pause_s)
        steps.append(summary)
        if keep is not None:
            keep(result)
        log(
            f"  {rate:>6.1f} req/s: {summary['ok']}/{summary['sent']} ok, "
            f"p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, "
            f"{summary['throughput']} req/s"
        )
        time.sleep(pause_s)
        return result.sustained

    low = None
    for n, rate in enumerate(rates):
        if not measured(rate, seed=100 + n, confirm=True):
            high = rate
            break
        low = rate
    else:
        high = None
    for k in range(refine):
        if low is None or high is None or high <= low * 1.1:
            break
        middle = round((low + high) / 2)
        recover()
        if measured(middle, seed=100 + len(rates) + k, confirm=True):
            low = middle
        else:
            high = middle
    return sorted(steps, key=lambda s: s["rate"])


async def _sequential(url: str, send: Sender, count: int, timeout_s: float) -> list[Outcome]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as client:
        for i in range(count):
            start = time.perf_counter()
            status, body = await send(client, i)
            ms = (time.perf_counter() - start) * 1000
            out.append(Outcome("ok" if status == 200 else "error", ms, status, body))
    return out


def run_sequential(url: str, send: Sender, count: int, timeout_s: float = 15.0) -> list[Outcome]:
    """``count`` requests one after another: the path of one request, no queueing."""
    check_loopback(url)
    return asyncio.run(_sequential(url, send, count, timeout_s))
