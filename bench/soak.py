"""``python -m bench soak [--minutes 30]``: the local platform under steady, mixed
load for a long time, ending with the proof that every request was answered exactly
once, none with a 5xx, and that each process's memory stayed flat.

The platform runs as real processes (``bench.platform_proc``, as the benchmarks start
it) with the manifest as it is. The open-loop generator (``bench.loadgen``) sends
predicts at a modest rate, about half of what the platform sustains here: sync and
async to both models, some pinned to a version (header or ``params.version``), a few
deliberately bad inputs (422 expected), async ones polled to their end and some
cancelled. Meanwhile the canary of digits-cnn moves (90/10, 50/50, 100/0, through the
operator CLI) and a worker is killed (SIGKILL) every few minutes; the supervisor
starts its replacement. Every process's RSS is sampled every 10 s.

At the end each request's final status is read back from the results table (and
through the API for any still queued there), every worker log is searched for a
result stored twice, and the figures go to ``soak.json``; ``soak.md`` renders them.
The exit status is non-zero if a request was lost, answered twice, refused when it
should not have been, or got a 5xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import TENSOR_MODEL, TEXT_MODEL, digit_images, machine_info, percentile
from bench.common import sentences as make_sentences
from bench.emulator_backlog import rss_mib
from bench.loadgen import Sender, run_step
from bench.platform_proc import local_platform
from bench.proc_cpu import role
from bench.report import clean, render
from harness.local_platform import RunningPlatform, descendants, ready_pid
from switchyard.schemas import FINAL_STATUSES

DEFAULT_MINUTES = 30.0
DEFAULT_RATE = 6.0  # predicts/s: about half of what the platform sustains on this machine
SAMPLE_EVERY_S = 10.0
POLL_S = 0.5
CALL_TIMEOUT_S = 30.0
ROUTING_PICKUP_S = 6.0  # the router caches a routing document for 5 s
USERS = 1000  # sticky keys (x-user-id) the load is spread over
CANCEL_SHARE = 0.3  # of async requests, cancelled shortly after their 202
CANARY_MODEL = TENSOR_MODEL  # registered with v1 and v2 at start
CANARY_STEPS = (("v1=90", "v2=10"), ("v1=50", "v2=50"), ("v1=100", "v2=0"))
# A process "grows" when its fitted slope adds more than this share of its RSS per
# hour and more than the sampling noise over the fitted span.
FLAT_SHARE_PER_HOUR = 0.02
NOISE_MIB = 2.0
WORKER_EVENTS = (
    "result stored",
    "duplicate suppressed",
    "cancelled; deleted without running",
    "retries exhausted; the message goes to the DLQ",
    "batch failed; messages released for retry",
)


@dataclass(frozen=True)
class Planned:
    """One request of the mix."""

    kind: str  # sync | async | bad
    model: str
    pin: str | None = None  # "header" (x-model-version) or "body" (params.version)
    version: str | None = None  # the pinned version
    bad: str | None = None  # what is wrong with a bad input
    cancel_after_s: float | None = None  # async: DELETE this long after the 202
    inputs: int = 1
    user: int = 0

    @property
    def label(self) -> str:
        if self.kind == "bad":
            return "bad input"
        pinned = f", pinned {self.version} ({self.pin})" if self.pin else ""
        cancel = ", cancelled" if self.cancel_after_s is not None else ""
        return f"{self.kind} {self.model}{pinned}{cancel}"


# (share of predicts, request); cancels are drawn from the async ones.
MIX: tuple[tuple[float, Planned], ...] = (
    (0.245, Planned("sync", TEXT_MODEL)),
    (0.245, Planned("sync", TENSOR_MODEL)),
    (0.15, Planned("async", TEXT_MODEL)),
    (0.15, Planned("async", TENSOR_MODEL)),
    (0.04, Planned("sync", TEXT_MODEL, pin="header", version="v1")),
    (0.04, Planned("sync", TENSOR_MODEL, pin="header", version="v1")),
    (0.04, Planned("async", TEXT_MODEL, pin="body", version="v1")),
    (0.04, Planned("async", TENSOR_MODEL, pin="body", version="v2")),
    (0.05, Planned("bad", TEXT_MODEL)),
)
BAD_INPUTS = ("text_not_a_string", "image_too_short", "pixel_out_of_range", "unknown_param")


def plan(count: int, seed: int) -> list[Planned]:
    """``count`` requests drawn from ``MIX``, reproducible by ``seed``."""
    rng = random.Random(seed)
    total = sum(share for share, _ in MIX)
    out = []
    for i in range(count):
        template = _draw(rng.random() * total)
        changes: dict[str, Any] = {"inputs": rng.randint(1, 3), "user": rng.randrange(USERS)}
        if template.kind == "bad":
            bad = BAD_INPUTS[i % len(BAD_INPUTS)]
            model = TEXT_MODEL if bad in ("text_not_a_string", "unknown_param") else TENSOR_MODEL
            changes.update(bad=bad, model=model)
        if template.kind == "async" and rng.random() < CANCEL_SHARE:
            changes["cancel_after_s"] = round(rng.uniform(0.0, 0.3), 3)
        out.append(Planned(**{**asdict(template), **changes}))
    return out


def _draw(pick: float) -> Planned:
    for share, template in MIX:
        if pick < share:
            return template
        pick -= share
    return MIX[-1][1]


def request_body(p: Planned, i: int, texts: Sequence[str], images: Sequence[Any]) -> dict:
    if p.bad == "text_not_a_string":
        return {"inputs": [123]}
    if p.bad == "image_too_short":
        return {"inputs": [images[i % len(images)][:63]]}
    if p.bad == "pixel_out_of_range":
        return {"inputs": [[17.0] + list(images[i % len(images)][1:])]}
    if p.bad == "unknown_param":
        return {"inputs": [texts[i % len(texts)]], "params": {"temperature": 1}}
    pool = texts if p.model == TEXT_MODEL else images
    body: dict[str, Any] = {"inputs": [pool[(i + k) % len(pool)] for k in range(p.inputs)]}
    if p.pin == "body":
        body["params"] = {"version": p.version}
    return body


@dataclass
class Sent:
    """What the caller saw of one request."""

    index: int
    label: str
    kind: str
    model: str
    pinned_version: str | None
    sent_at: float  # seconds since the load began
    started: float = 0.0  # monotonic
    http: list[int] = field(default_factory=list)  # every answer but 200s and 429s to polls
    request_id: str | None = None
    version: str | None = None
    answers: list[str] = field(default_factory=list)  # final statuses the caller was given
    cancel: int | None = None  # the DELETE's status
    latency_ms: float | None = None  # to the first final answer
    polls: int = 0
    throttled: int = 0
    swept: str | None = None  # the status read back at the end
    error: str | None = None  # a client-side failure

    def answer(self, status: str) -> None:
        if status in FINAL_STATUSES:
            if not self.answers:
                self.latency_ms = round((time.monotonic() - self.started) * 1000, 1)
            self.answers.append(status)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


async def _poll(client: httpx.AsyncClient, s: Sent, headers: dict[str, str], until: float) -> None:
    """GET the request until it has a final status (or the soak's drain ends)."""
    delay = POLL_S
    while time.monotonic() < until:
        await asyncio.sleep(delay)
        r = await client.get(f"/v1/requests/{s.request_id}", headers=headers)
        s.polls += 1
        if r.status_code == 429:
            s.throttled += 1
            continue
        if r.status_code != 200:
            s.http.append(r.status_code)
            return
        status = _json(r).get("status")
        if status in FINAL_STATUSES:
            s.answer(status)
            return
        delay = min(delay * 1.5, 2.0)


def soak_sender(
    planned: Sequence[Planned],
    ledger: list[Sent],
    api_key: str,
    origin: float,
    until: float,
    texts: Sequence[str],
    images: Sequence[Any],
) -> Sender:
    """The load generator's sender: one planned request, followed to its end."""
    base = {"x-api-key": api_key}

    async def send(client: httpx.AsyncClient, i: int) -> tuple[int, Any]:
        p = planned[i]
        now = time.monotonic()
        s = Sent(i, p.label, p.kind, p.model, p.version, round(now - origin, 2), now)
        ledger.append(s)
        headers = {**base, "x-user-id": f"soak-user-{p.user}"}
        if p.pin == "header":
            headers["x-model-version"] = p.version or ""
        path = f"/v1/models/{p.model}/predict" + ("?async=true" if p.kind == "async" else "")
        try:
            r = await client.post(
                path,
                json=request_body(p, i, texts, images),
                headers=headers,
                timeout=CALL_TIMEOUT_S,
            )
            s.http.append(r.status_code)
            doc = _json(r)
            s.request_id = doc.get("request_id")
            s.version = doc.get("version")
            if r.status_code == 202 and s.request_id:
                if p.cancel_after_s is not None:
                    await asyncio.sleep(p.cancel_after_s)
                    d = await client.delete(f"/v1/requests/{s.request_id}", headers=base)
                    s.cancel = d.status_code
                    s.http.append(d.status_code)
                    s.answer(_json(d).get("status", ""))
                if not s.answers:
                    await _poll(client, s, base, until)
            else:
                s.answer(doc.get("status", ""))
        except httpx.HTTPError as exc:
            s.error = f"{type(exc).__name__}: {exc}"[:200]
        return (s.http[0] if s.http else 0), None

    return send


# -- what happens to the platform meanwhile --------------------------------------------


def timeline(
    duration_s: float, canary_every_s: float, kill_every_s: float
) -> list[tuple[float, str, str]]:
    """(seconds into the load, "canary" or "kill", weights or model), in time order:
    the canary cycles through ``CANARY_STEPS`` from the second step (the first is set
    before the load), and kills alternate between the two models."""
    events: list[tuple[float, str, str]] = []
    k = 1
    while k * canary_every_s < duration_s:
        events.append((k * canary_every_s, "canary", " ".join(CANARY_STEPS[k % 3])))
        k += 1
    k = 1
    while k * kill_every_s < duration_s:
        events.append((k * kill_every_s, "kill", (TEXT_MODEL, TENSOR_MODEL)[(k - 1) % 2]))
        k += 1
    return sorted(events)


def set_canary(platform: RunningPlatform, weights: str) -> dict[str, Any]:
    """``switchyard traffic set`` on the running platform, as an operator runs it."""
    result = platform.cli("traffic", "set", CANARY_MODEL, *weights.split())
    out: dict[str, Any] = {"what": "canary", "weights": weights, "rc": result.returncode}
    if result.returncode:
        out["stderr"] = result.stderr.strip()[-300:]
    return out


def kill_worker(platform: RunningPlatform, model: str, wait_s: float = 120) -> dict[str, Any]:
    """SIGKILL a ready worker of ``model`` (one of this platform's own processes) and
    wait for the supervisor's replacement to be ready."""
    tree = set(descendants(platform.process.pid))
    for ready in sorted(platform.run_dir.glob(f"worker-{model}-*.ready")):
        pid = ready_pid(ready)
        if pid is None or pid not in tree or not role(pid).startswith("worker"):
            continue
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out: dict[str, Any] = {"what": "kill", "model": model, "pid": pid, "worker": ready.stem}
        while time.monotonic() - killed < wait_s:
            replacement = ready_pid(ready)
            if replacement and replacement != pid:
                out["replacement_pid"] = replacement
                out["ready_after_s"] = round(time.monotonic() - killed, 1)
                break
            time.sleep(0.2)
        return out
    return {"what": "kill", "model": model, "skipped": "no ready worker"}


class Disturbances(threading.Thread):
    """Runs the timeline's canary changes and worker kills during the load."""

    def __init__(
        self,
        platform: RunningPlatform,
        events: list[tuple[float, str, str]],
        origin: float,
        log: Callable[[str], None],
    ) -> None:
        super().__init__(name="soak-disturbances", daemon=True)
        self.platform, self.events, self.origin, self.log = platform, events, origin, log
        self.done: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        for at, what, arg in self.events:
            if self.stopped.wait(max(self.origin + at - time.monotonic(), 0)):
                return
            started = round(time.monotonic() - self.origin, 1)
            try:
                if what == "canary":
                    event = set_canary(self.platform, arg)
                else:
                    event = kill_worker(self.platform, arg)
            except Exception as exc:  # noqa: BLE001 - recorded; the soak goes on
                event = {"what": what, "arg": arg, "error": f"{type(exc).__name__}: {exc}"}
            event["at_s"] = started
            self.done.append(event)
            self.log(f"  {started:>7.1f} s: {json.dumps(event)}")


def process_name(pid: int, root: int) -> str:
    """``proc_cpu.role``, with the supervisor's own process told apart from the
    splitter it runs (a Lambda runtime stand-in)."""
    name = role(pid)
    if name == "supervisor" and pid != root:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return name
        if b"lambda_runtime" in cmd:
            return "splitter"
    return name


class MemorySampler(threading.Thread):
    """RSS of every process of the platform, every ``every_s``; and a line of
    progress to the log once a minute."""

    def __init__(
        self,
        root: int,
        origin: float,
        ledger: list[Sent],
        log: Callable[[str], None],
        every_s: float = SAMPLE_EVERY_S,
    ) -> None:
        super().__init__(name="soak-memory", daemon=True)
        self.root, self.origin, self.ledger, self.log, self.every_s = (
            root,
            origin,
            ledger,
            log,
            every_s,
        )
        self.processes: dict[int, dict[str, Any]] = {}
        self.stopped = threading.Event()

    def sample(self) -> None:
        t = round(time.monotonic() - self.origin, 1)
        for pid in descendants(self.root):
            mib = rss_mib(pid)
            if mib is None:
                continue
            proc = self.processes.setdefault(
                pid, {"process": process_name(pid, self.root), "pid": pid, "samples": []}
            )
            proc["samples"].append([t, mib])

    def run(self) -> None:
        last_log = 0.0
        while True:
            self.sample()
            now = time.monotonic() - self.origin
            if now - last_log >= 60:
                last_log = now
                sent = list(self.ledger)
                self.log(
                    f"  {now:>7.1f} s: {len(sent)} sent, {sum(bool(s.answers) for s in sent)} "
                    f"answered, {sum(c >= 500 for s in sent for c in s.http)} 5xx"
                )
            if self.stopped.wait(self.every_s):
                return


# -- the analysis (pure: unit-tested in bench/test_bench.py) -------------------------


def slope_per_hour(points: Sequence[Sequence[float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour; None with fewer
    than three points or no time between them."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(p[0] for p in points) / n
    mean_m = sum(p[1] for p in points) / n
    spread = sum((p[0] - mean_t) ** 2 for p in points)
    if spread == 0:
        return None
    return sum((p[0] - mean_t) * (p[1] - mean_m) for p in points) / spread * 3600


def memory_summary(
    processes: Sequence[Mapping[str, Any]],
    warmup_s: float,
    load_end_s: float,
    predicts_per_hour: float,
) -> list[dict[str, Any]]:
    """Per process: start, end and peak RSS, and the slope fitted over its samples
    from ``warmup_s`` after its first one up to the end of the load."""
    out = []
    for proc in processes:
        points = proc["samples"]
        if not points:
            continue
        first = points[0][0]
        fitted = [p for p in points if first + warmup_s <= p[0] <= load_end_s]
        slope = slope_per_hour(fitted)
        span = fitted[-1][0] - fitted[0][0] if fitted else 0.0
        end = points[-1][1]
        if slope is None:
            verdict = "too short to fit"
        elif slope * span / 3600 <= NOISE_MIB or slope <= FLAT_SHARE_PER_HOUR * end:
            verdict = "flat"
        else:
            verdict = "grows"
        out.append(
            {
                "process": proc["process"],
                "pid": proc["pid"],
                "first_s": first,
                "last_s": points[-1][0],
                "start_mib": points[0][1],
                "end_mib": end,
                "peak_mib": max(p[1] for p in points),
                "fitted_samples": len(fitted),
                "slope_mib_per_hour": None if slope is None else round(slope, 2),
                "kib_per_request": None
                if slope is None or not predicts_per_hour
                else round(slope * 1024 / predicts_per_hour, 3),
                "verdict": verdict,
            }
        )
    return sorted(out, key=lambda r: (r["process"], r["first_s"]))


@dataclass
class WorkerLog:
    """What the workers' logs say about delivery."""

    stored: dict[str, list[str]]  # request id -> each status stored ("result stored")
    suppressed: dict[str, int]  # request id -> "duplicate suppressed" lines
    events: dict[str, int]  # how often each delivery event was logged


def read_worker_log(events: Sequence[Mapping[str, Any]]) -> WorkerLog:
    """The delivery events among the workers' log events
    (``RunningPlatform.worker_log_events``)."""
    stored: dict[str, list[str]] = defaultdict(list)
    suppressed: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    for event in events:
        message, rid = event.get("message"), event.get("request_id")
        if message in WORKER_EVENTS:
            counted[message] += 1
        if message == "result stored" and rid:
            stored[rid].append(event.get("status", "?"))
        elif message == "duplicate suppressed" and rid:
            suppressed[rid] += 1
    return WorkerLog(dict(stored), dict(suppressed), dict(counted))


def final_statuses(r: Mapping[str, Any]) -> list[str]:
    """Every final status the caller was given or read back, without repeats."""
    seen = [*r.get("answers", []), r.get("swept")]
    return list(dict.fromkeys(s for s in seen if s in FINAL_STATUSES))


def outcome(r: Mapping[str, Any]) -> str:
    http = r.get("http") or []
    first = http[0] if http else None
    if r["kind"] == "bad":
        return f"refused {first}" if first else "no answer"
    finals = final_statuses(r)
    if not finals:
        return f"no final status ({first})" if first else "no answer"
    final = finals[0]
    if r["kind"] == "sync":
        return final if first == 200 else f"{final} after {first}"
    if r.get("cancel") is not None:
        return f"{final} (DELETE {r['cancel']})"
    return final


def account(records: Sequence[Mapping[str, Any]], worker_log: WorkerLog) -> dict:
    """Exactly-once accounting. ``records``: what the caller saw of each request
    (``Sent`` as a dict); ``worker_log``: what the workers stored (and suppressed),
    per request id. A request is lost without a final status; answered twice when the
    caller was given two different final statuses, a worker stored its result more
    than once, or a worker stored a result other than the one the request ended with
    (a cancelled request that ran anyway). 5xx: any answer of 500 or more. Unexpected:
    a bad input not refused with 422, a valid one refused with any other 4xx than a
    DELETE's 409, or a pinned request answered by another version."""
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    problems: dict[str, list[dict[str, Any]]] = {
        "lost": [],
        "answered_twice": [],
        "http_5xx": [],
        "unexpected": [],
    }
    stored = worker_log.stored
    sent_ids = set()
    suppressed_for: Counter[str] = Counter()
    for r in records:
        rid = r.get("request_id")
        if rid:
            sent_ids.add(rid)
        by_kind[r["label"]][outcome(r)] += 1
        http = list(r.get("http") or [])
        example = {"index": r["index"], "label": r["label"], "request_id": rid, "http": http}
        finals = final_statuses(r)
        if finals or r.get("swept"):
            example["final"] = finals or r.get("swept")
        if any(code >= 500 for code in http):
            problems["http_5xx"].append(example)
        if r["kind"] == "bad":
            if http[:1] != [422]:
                problems["unexpected"].append({**example, "why": "bad input not refused (422)"})
            continue
        if not finals:
            why = r.get("error") or f"no final status (read back: {r.get('swept')})"
            problems["lost"].append({**example, "why": why})
            continue
        if rid in worker_log.suppressed:
            suppressed_for[finals[0]] += worker_log.suppressed[rid]
        writes = stored.get(rid or "", [])
        if len(finals) > 1:
            problems["answered_twice"].append({**example, "why": f"answered {finals}"})
        elif len(writes) > 1:
            problems["answered_twice"].append({**example, "why": f"stored {len(writes)} times"})
        elif writes and writes[0] != finals[0]:
            why = f"a worker stored {writes[0]!r}; the request ended {finals[0]!r}"
            problems["answered_twice"].append({**example, "why": why})
        refused = [code for code in http if 400 <= code < 500 and code != 409]
        if refused:
            problems["unexpected"].append({**example, "why": f"refused with {refused}"})
        pinned = r.get("pinned_version")
        if pinned and r.get("version") not in (None, pinned):
            why = f"pinned to {pinned}, answered by {r.get('version')}"
            problems["unexpected"].append({**example, "why": why})
    counts = {name: len(found) for name, found in problems.items()}
    return {
        "requests": len(records),
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "problems": counts,
        "examples": {name: found[:10] for name, found in problems.items() if found},
        "results_stored": sum(len(w) for w in stored.values()),
        "stored_for_unknown_ids": len(set(stored) - sent_ids),
        # Suppressed writes by how their request ended: a redelivery of a finished
        # request, or work that finished after its request was cancelled.
        "suppressed_by_final_status": dict(sorted(suppressed_for.items())),
        "passed": not any(counts.values()),
    }


def latency_summary(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Percentiles of the time to the final answer: sync requests answered 200, and
    async requests not cancelled (polled, so within a poll interval)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.get("latency_ms") is None or r["kind"] == "bad":
            continue
        http = r.get("http") or []
        if r["kind"] == "sync" and http[:1] == [200]:
            groups[f"sync {r['model']} (200)"].append(r["latency_ms"])
        elif r["kind"] == "sync":
            groups[f"sync {r['model']} (202, then polled)"].append(r["latency_ms"])
        elif r.get("cancel") is None:
            groups[f"async {r['model']} (polled to its end)"].append(r["latency_ms"])
    return [
        {
            "requests": name,
            "n": len(values),
            "p50_ms": round(percentile(values, 50), 1),
            "p95_ms": round(percentile(values, 95), 1),
            "p99_ms": round(percentile(values, 99), 1),
            "max_ms": round(max(values), 1),
        }
        for name, values in sorted(groups.items())
    ]


def canary_shares(
    records: Sequence[Mapping[str, Any]],
    changes: Sequence[tuple[float, str]],
    end_s: float,
    settle_s: float = ROUTING_PICKUP_S,
) -> list[dict[str, Any]]:
    """Per canary phase (from ``settle_s`` after each change to the next change), the
    share of the canary model's unpinned requests assigned to each version."""
    out = []
    for n, (at, weights) in enumerate(changes):
        until = changes[n + 1][0] if n + 1 < len(changes) else end_s
        versions = Counter(
            r["version"]
            for r in records
            if r["model"] == CANARY_MODEL
            and r["kind"] != "bad"
            and not r.get("pinned_version")
            and r.get("version")
            and at + settle_s <= r["sent_at"] < until
        )
        total = sum(versions.values())
        out.append(
            {
                "from_s": at,
                "to_s": until,
                "weights": weights,
                "requests": total,
                "shares": {v: round(c / total, 3) for v, c in sorted(versions.items())}
                if total
                else {},
            }
        )
    return out


# -- the run -------------------------------------------------------------------------


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def read_back(platform: RunningPlatform, ledger: Sequence[Sent], tenant: str) -> None:
    """Each request's status as it stands: from the results table in batches, and
    through the API (which answers ``expired`` past the work's expiry) for any still
    queued there."""
    from switchyard.settings import Settings
    from switchyard.wiring import build_adapters

    platform.act_as_operator()
    results = build_adapters(Settings(**platform.info["settings"])).results
    ids = [s for s in ledger if s.request_id]
    statuses = results.statuses([(tenant, s.request_id or "") for s in ids])
    with httpx.Client(base_url=platform.url, timeout=CALL_TIMEOUT_S) as client:
        for s in ids:
            status = statuses.get((tenant, s.request_id or ""))
            if status not in FINAL_STATUSES:
                r = client.get(
                    f"/v1/requests/{s.request_id}", headers={"x-api-key": platform.api_key}
                )
                if r.status_code != 200:
                    s.http.append(r.status_code)
                status = _json(r).get("status") or f"http {r.status_code}"
            s.swept = status


def queue_depths(platform: RunningPlatform) -> dict[str, int]:
    """Messages left on every work queue and DLQ (visible and in flight)."""
    from switchyard import aws

    platform.act_as_operator()
    sqs = aws.client("sqs", platform.info["region"], platform.info["emulator_url"])
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    out = {}
    for kind in ("queues", "dlqs"):
        for model, lanes in platform.info[kind].items():
            for lane, url in lanes.items():
                attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)
                out[f"{model} {lane}{' DLQ' if kind == 'dlqs' else ''}"] = sum(
                    int(attrs["Attributes"][n]) for n in names
                )
    return out


def run(
    minutes: float,
    rate: float,
    log: Callable[[str], None],
    seed: int = 1,
    drain_s: float = 180.0,
) -> dict[str, Any]:
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(name, value)
    duration_s = minutes * 60
    warmup_s = _clamp(duration_s / 5, 30, 300)
    canary_every_s = _clamp(duration_s / 4, 30, 300)
    kill_every_s = _clamp(duration_s / 7, 60, 300)
    events = timeline(duration_s, canary_every_s, kill_every_s)
    count = max(1, round(rate * duration_s))
    planned = plan(count, seed)
    texts, images = make_sentences(), digit_images()
    results: dict[str, Any] = {
        "minutes": minutes,
        "short_run": minutes < DEFAULT_MINUTES,
        "rate": rate,
        "seed": seed,
        "machine": machine_info(),
        "config": {
            "predicts": count,
            "warmup_s": warmup_s,
            "canary_every_s": canary_every_s,
            "kill_every_s": kill_every_s,
            "drain_s": drain_s,
            "sample_every_s": SAMPLE_EVERY_S,
            "poll_s": POLL_S,
            "cancel_share_of_async": CANCEL_SHARE,
            "sticky_users": USERS,
            "canary_model": CANARY_MODEL,
        },
        "mix": [{"share": share, "requests": t.label} for share, t in MIX],
    }
    started = time.perf_counter()
    log("starting the local platform")
    with local_platform() as platform:
        tenant = next(t for t, k in platform.keys.items() if k == platform.api_key)
        first = set_canary(platform, " ".join(CANARY_STEPS[0]))
        time.sleep(ROUTING_PICKUP_S)
        log(
            f"soak: {count} predicts at {rate}/s for {minutes} min on {platform.url}; "
            f"{len(events)} disturbances"
        )
        ledger: list[Sent] = []
        origin = time.monotonic()
        first["at_s"] = 0.0
        disturbances = Disturbances(platform, events, origin, log)
        sampler = MemorySampler(platform.process.pid, origin, ledger, log)
        sampler.start()
        disturbances.start()
        send = soak_sender(
            planned,
            ledger,
            platform.api_key,
            origin,
            origin + duration_s + drain_s,
            texts,
            images,
        )
        step = run_step(platform.url, send, rate, duration_s, seed, timeout_s=drain_s + 60)
        load_end_s = round(time.monotonic() - origin, 1)
        disturbances.stopped.set()
        disturbances.join(150)
        sampler.stopped.set()
        sampler.join(30)
        log(f"load and drain done at {load_end_s} s; reading every request back")
        read_back(platform, ledger, tenant)
        # A worker logs a batch's results before it deletes their messages: once the
        # queues are empty, every answer read back is in the logs.
        for model in platform.info["queues"]:
            with contextlib.suppress(TimeoutError):  # what is left is reported below
                platform.wait_until_idle(model, timeout_s=60)
        worker_log = read_worker_log(platform.worker_log_events())
        results["queues_at_end"] = queue_depths(platform)
        results["platform_notices"] = [
            line for line in platform.output if "ROLLBACK" in line or "exited with" in line
        ]
        processes = list(sampler.processes.values())
    records = [asdict(s) for s in sorted(ledger, key=lambda s: s.index)]
    changes = [(0.0, first["weights"])] + [
        (e["at_s"], e["weights"]) for e in disturbances.done if e["what"] == "canary"
    ]
    results.update(
        {
            "load": {
                "sent": len(records),
                "seconds": round(step.elapsed_s, 1),
                "send_lag_ms_p99": round(step.send_lag_ms_p99, 1),
                "load_end_s": load_end_s,
                "polls": sum(s.polls for s in ledger),
                "throttled_polls": sum(s.throttled for s in ledger),
            },
            "events": [first, *disturbances.done],
            "accounting": account(records, worker_log),
            "worker_log": worker_log.events,
            "latency": latency_summary(records),
            "canary": canary_shares(records, changes, min(duration_s, load_end_s)),
            "memory": memory_summary(processes, warmup_s, duration_s, rate * 3600),
            "memory_samples": processes,
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
    )
    return results


# -- the page --------------------------------------------------------------------------


def reading(results: dict[str, Any]) -> list[str]:
    """A few sentences from the figures: the verdict, and what grew."""
    a = results["accounting"]
    out = []
    if a["passed"]:
        out.append(
            f"Every one of the {a['requests']:,} requests ended exactly once: each valid "
            "request has one final status, the same wherever the caller read it, and no "
            "worker stored a result twice or for a request that had ended otherwise; "
            "no answer was a 5xx, and every bad input was refused with 422."
        )
    else:
        found = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in a["problems"].items() if v)
        out.append(f"The soak failed: {found}. The examples above name the requests.")
    kills = [e for e in results["events"] if e["what"] == "kill" and e.get("pid")]
    if kills:
        backs = [e["ready_after_s"] for e in kills if e.get("ready_after_s")]
        out.append(
            f"{len(kills)} workers were killed mid-load; "
            + (f"replacements were ready after {min(backs)}-{max(backs)} s, and " if backs else "")
            + "no request was stored twice."
        )
    suppressed = a.get("suppressed_by_final_status") or {}
    if suppressed:
        out.append(
            f"{sum(suppressed.values())} worker writes were suppressed because their "
            "request had already ended ("
            + ", ".join(f"{v} {k}" for k, v in suppressed.items())
            + "): redeliveries of finished work, and work that finished after its request "
            "was cancelled while it ran (the worker logs both as `duplicate suppressed`)."
        )
    growing = [m for m in results["memory"] if m["verdict"] == "grows"]
    fitted = [m for m in results["memory"] if m["verdict"] != "too short to fit"]
    if not fitted:
        out.append("No process lived long enough past its warm-up for a memory slope.")
    elif not growing:
        out.append("Every process's memory was flat after its warm-up.")
    else:
        out.append(
            "Growing: "
            + "; ".join(
                f"{m['process']} (pid {m['pid']}) {m['slope_mib_per_hour']:+.1f} MiB/h, "
                f"{m['kib_per_request']:.2f} KiB per request"
                for m in growing
            )
            + "."
        )
    if any(m["process"] == "emulator" for m in growing):
        out.append(
            "The emulator keeps every results-table item in memory (moto does not delete "
            "items at their TTL), so its growth per request is about the size of a stored "
            "result; in AWS that is table storage, not a process's memory."
        )
    if results.get("short_run"):
        out.append(
            "A short run: slopes fitted over a minute or two are noise-prone; the "
            "30-minute run is the one to read for memory."
        )
    return out


def markdown(results: dict[str, Any]) -> str:
    """``soak.md``: ``bench/templates/soak.md.j2`` filled with the soak's figures."""
    return render(
        "soak.md.j2",
        results=results,
        reading=reading(results),
        settle_s=ROUTING_PICKUP_S,
        flat_share=FLAT_SHARE_PER_HOUR,
        noise_mib=NOISE_MIB,
    )


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / "soak.json"
    data.write_text(json.dumps(clean(results), indent=1) + "\n")
    page = out_dir / "soak.md"
    page.write_text(markdown(clean(results)))
    return [page, data]
