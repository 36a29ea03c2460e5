"""What ``switchyard status`` and the local dashboard show, and the local
platform's reader of it.

Per model: its workers (running, starting, desired: its own service's, or its
pool's), each lane's queue (visible, in flight, age of the oldest message), its
recent requests (rate, errors, p50 and p99 latency), the last scaling decision with
its reason and, for a model in a pool, its cold loads. Per pool: its workers, the
versions they hold with their footprints, against the budget, and the loads and
evictions (counts, per minute) with the load time's p50 and p99. Every reader fills
the same :class:`Status`, so the command, its ``--json`` and the dashboard say the
same thing whichever substrate they look at.

:class:`LocalStatusReader` reads the local platform: workers, queues and the last
decision are what the supervisor's autoscaler decided on, from the file it writes
every tick (``scaling.json`` in the run folder). While that file is missing or
stale (the supervisor stopped), the reader looks for itself: queue figures from
CloudWatch's SQS metrics, which the emulator answers live (``sqs_metrics``), and
worker counts from the workers' ready files and live processes (no desired count
then). Request figures come from the router's EMF lines (``logs/router.log``), read
with the rollback controller's :class:`~switchyard_local.controller.MetricsWindow`.
A pool's figures come from the state its workers write beside their ready files
(``worker-<pool>-<n>.pool.json``: ``switchyard_worker.pool``): what each live one
holds now, and the loads and evictions of every one of this run.
A deployed stage's reader is the operator CLI's (``switchyard_cli.status``); it
reads CloudWatch with this module's :func:`queue_figures` and :func:`request_figures`,
which the emulator answers as AWS does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from switchyard.canary import VersionStats
from switchyard.schemas import LANES
from switchyard.settings import ENV_PREFIX
from switchyard.telemetry import NAMESPACE as METRICS_NAMESPACE
from switchyard_local.controller import MetricsWindow
from switchyard_local.emulator import process_alive

SCALING_FILE = "scaling.json"
# Beside a pool worker's ready file: its model cache's state (WorkerSettings.pool_state_file).
POOL_STATE_SUFFIX = ".pool.json"
# Beside a worker's ready file: the engine of each generative version it loaded
# (switchyard_worker.__main__.ENGINES_SUFFIX).
ENGINES_SUFFIX = ".engines.json"
# The supervisor rewrites the scaling file every second or two; older than this, it
# has stopped and the figures in the file are history, not status.
STALE_AFTER_SECONDS = 15.0
# Requests are counted over this much of the recent past.
REQUEST_WINDOW_SECONDS = 60.0
# Where a reader starts in a long router log: enough for a window at a few hundred
# requests a second (three EMF documents of ~400 bytes per request).
ROUTER_LOG_TAIL_BYTES = 16 * 1024 * 1024
SQS_NAMESPACE = "AWS/SQS"
# The worker setting that names its ready file (WorkerSettings.ready_file).
READY_FILE_VARIABLE = f"{ENV_PREFIX}READY_FILE"


@dataclass
class WorkerFigures:
    """Workers of one model: capacity (models loaded), on the way, and wanted."""

    running: int | None = None
    starting: int | None = None
    desired: int | None = None
    draining: int | None = None  # asked to stop, finishing what they hold


@dataclass
class LaneFigures:
    """One lane's queue, as SQS reports it."""

    visible: int | None = None
    in_flight: int | None = None
    oldest_age_seconds: float | None = None

    @property
    def depth(self) -> int | None:
        if self.visible is None and self.in_flight is None:
            return None
        return (self.visible or 0) + (self.in_flight or 0)


@dataclass
class RequestFigures:
    """The requests the router answered over the recent window, whatever their
    version or role (pinned ones too): answers given while the caller waited, as the
    router's ``Requests`` and ``Latency`` metrics count them. An async submission is
    queue work until a worker answers it, and is not among them."""

    window_seconds: float = REQUEST_WINDOW_SECONDS
    count: int | None = None
    errors: int | None = None
    per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None

    @classmethod
    def from_stats(cls, stats: VersionStats, window_seconds: float) -> RequestFigures:
        return cls(
            window_seconds=window_seconds,
            count=stats.requests,
            errors=stats.errors,
            per_second=round(stats.requests / window_seconds, 3),
            p50_ms=_round(stats.p50_ms),
            p99_ms=_round(stats.p99_ms),
        )


@dataclass
class ModelStatus:
    """One model's figures; None wherever the source could not say. A model in a
    pool shows its pool's workers and decisions beside its own queues and requests."""

    workers: WorkerFigures = field(default_factory=WorkerFigures)
    lanes: dict[str, LaneFigures] = field(
        default_factory=lambda: {lane: LaneFigures() for lane in LANES}
    )
    requests: RequestFigures = field(default_factory=RequestFigures)
    # at, action, desired, reason, inputs (as the deciding side recorded them); None
    # before the first decision. ``last_change`` is the last one that changed the
    # count (``last_decision`` is most often a hold).
    last_decision: dict[str, Any] | None = None
    last_change: dict[str, Any] | None = None
    # Seconds since a lane last had work (what scale-in waits on), where known.
    idle_seconds: float | None = None
    # Where the worker and queue figures came from (see the module's docstring).
    source: str = ""
    # The pool that serves it (None: a service of its own), and how many times its
    # pool's workers have loaded one of its versions.
    pool: str | None = None
    cold_loads: int | None = None
    # The engine its live workers decode with (``vllm``, ``transformers``; a
    # generative model only), from what each wrote beside its ready file.
    engine: str | None = None


@dataclass
class ResidentVersion:
    """A version a pool's worker holds, and what it measured it to take."""

    model: str
    version: str
    worker: str
    footprint_mib: float | None = None
    device_footprint_mib: float | None = None
    last_used: float | None = None  # epoch seconds
    uses: int | None = None


@dataclass
class PoolStatus:
    """One pool's figures; None wherever the source could not say."""

    models: list[str] = field(default_factory=list)
    workers: WorkerFigures = field(default_factory=WorkerFigures)
    budget_mib: float | None = None
    device_budget_mib: float | None = None
    # What the live workers hold, most recently used first, and each worker's total.
    resident: list[ResidentVersion] = field(default_factory=list)
    held_mib: dict[str, float] = field(default_factory=dict)
    # Counted over the workers of this run, and per minute over the recent window.
    loads: int | None = None
    evictions: int | None = None
    refusals: int | None = None
    window_seconds: float = REQUEST_WINDOW_SECONDS
    loads_per_minute: float | None = None
    evictions_per_minute: float | None = None
    # Load times (seconds) of the loads the workers remember (their last few hundred).
    load_p50_seconds: float | None = None
    load_p99_seconds: float | None = None
    last_decision: dict[str, Any] | None = None
    last_change: dict[str, Any] | None = None
    source: str = ""


@dataclass
class Status:
    """The platform's status at ``at`` (epoch seconds)."""

    at: float
    substrate: str  # "local" or "aws"
    models: dict[str, ModelStatus]
    pools: dict[str, PoolStatus] = field(default_factory=dict)
    # Budgeted tenants' months (switchyard.budgets.BudgetState.as_dict), where read.
    budgets: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for model, status in self.models.items():
            for lane, figures in status.lanes.items():
                out["models"][model]["lanes"][lane]["depth"] = figures.depth
        return out


# -- the supervisor's scaling file -------------------------------------------------


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class ScalingEntry:
    """One model's part of the scaling file, in this module's terms."""

    workers: WorkerFigures
    lanes: dict[str, LaneFigures]
    last_decision: dict[str, Any] | None
    last_change: dict[str, Any] | None
    idle_seconds: float | None


def parse_scaling_file(doc: Any, section: str = "models") -> dict[str, ScalingEntry]:
    """The models in the scaling file (``switchyard_local.autoscaler``'s
    ``Autoscaler.state``), or its worker services (``section="services"``), read
    leniently: a missing or malformed field is None rather than an error, so that a
    reader and a supervisor of different versions still show what they share."""
    models = doc.get(section) if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        return {}
    out = {}
    for model, entry in models.items():
        if not isinstance(entry, dict):
            continue
        workers = _mapping(entry.get("workers"))
        lanes = _mapping(entry.get("lanes"))
        decision, change = entry.get("last_decision"), entry.get("last_change")
        out[str(model)] = ScalingEntry(
            workers=WorkerFigures(
                running=_int(workers.get("running")),
                starting=_int(workers.get("starting")),
                desired=_int(workers.get("desired")),
                draining=_int(workers.get("draining")),
            ),
            lanes={lane: _lane_figures(_mapping(lanes.get(lane))) for lane in LANES},
            last_decision=normalise_decision(decision) if isinstance(decision, dict) else None,
            last_change=normalise_decision(change) if isinstance(change, dict) else None,
            idle_seconds=_round(_float(entry.get("idle_seconds"))),
        )
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _lane_figures(lane: Mapping[str, Any]) -> LaneFigures:
    return LaneFigures(
        visible=_int(lane.get("visible")),
        in_flight=_int(lane.get("in_flight")),
        oldest_age_seconds=_round(_float(lane.get("oldest_age_seconds"))),
    )


def normalise_decision(decision: Mapping[str, Any]) -> dict[str, Any]:
    """A decision with at least ``at``, ``action``, ``desired``, ``reason`` and
    ``inputs`` (None where the decider did not say); its other fields are kept."""
    return {
        **decision,
        "at": _float(decision.get("at")),
        "action": decision.get("action"),
        "desired": _int(decision.get("desired")),
        "reason": decision.get("reason"),
        "inputs": decision.get("inputs"),
    }


def read_scaling_file(
    path: Path, now: float, stale_after: float = STALE_AFTER_SECONDS
) -> tuple[dict[str, ScalingEntry], bool]:
    """The scaling file's models and whether it is fresh (written within
    ``stale_after`` seconds: its ``updated_at``, else the file's time); ({}, False)
    without one. The supervisor replaces the file whole (rename), so a read sees
    one version of it; a half-written file from any other writer reads as missing."""
    models, _, fresh = read_scaling_state(path, now, stale_after)
    return models, fresh


def read_scaling_state(
    path: Path, now: float, stale_after: float = STALE_AFTER_SECONDS
) -> tuple[dict[str, ScalingEntry], dict[str, ScalingEntry], bool]:
    """The scaling file's models and worker services, and whether it is fresh
    (:func:`read_scaling_file`)."""
    try:
        stat = path.stat()
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, {}, False
    models = parse_scaling_file(doc)
    services = parse_scaling_file(doc, "services")
    written = _float(doc.get("updated_at")) if isinstance(doc, dict) else None
    return models, services, bool(models) and now - (written or stat.st_mtime) <= stale_after


# -- local observations ------------------------------------------------------------


def _ready_file_of(pid: str) -> str | None:
    """The ready file a process was told to write (from its environment), if any."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = READY_FILE_VARIABLE.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def observe_workers(
    run_dir: Path,
    services: Iterable[str],
    ready_files_of: Callable[[], dict[int, str]] | None = None,
) -> dict[str, WorkerFigures]:
    """Worker counts per worker service (a model's own, or a pool's) from what the
    workers leave behind: a worker is *running* once its ready file
    (``worker-<service>-<n>.ready``, holding ``<host>-<pid>``) names a live process,
    and *starting* while a live process was told to write a ready file that does not
    name it yet. The desired count is the supervisor's to know.
    """
    services = list(services)
    processes = (ready_files_of or _processes_with_ready_files)()
    out = {}
    for service in services:
        pattern = re.compile(rf"^worker-{re.escape(service)}-\d+\.ready$")
        running: set[int] = set()
        for ready in run_dir.glob(f"worker-{service}-*.ready"):
            if not pattern.match(ready.name):
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(ready.read_text().rsplit("-", 1)[1])
                if process_alive(pid):
                    running.add(pid)
        starting = {
            pid
            for pid, path in processes.items()
            if Path(path).parent == run_dir and pattern.match(Path(path).name)
        } - running
        out[service] = WorkerFigures(running=len(running), starting=len(starting))
    return out


def read_engine(run_dir: Path, service: str, model: str) -> str | None:
    """The engines ``model``'s versions decode with on ``service``'s ready workers
    (``worker-<service>-<n>.engines.json``), joined by ", "; None where none said."""
    engines: set[str] = set()
    for path in run_dir.glob(f"worker-{service}-*{ENGINES_SUFFIX}"):
        ready = path.with_name(path.name.removesuffix(ENGINES_SUFFIX) + ".ready")
        if not ready.exists():
            continue  # a worker gone, or not ready yet
        with contextlib.suppress(OSError, ValueError):
            for key, engine in json.loads(path.read_text()).items():
                if key.split("/")[0] == model:
                    engines.add(str(engine))
    return ", ".join(sorted(engines)) or None


def read_pool_states(run_dir: Path, pool: str) -> list[dict[str, Any]]:
    """The states a pool's workers of this run wrote (``worker-<pool>-<n>.pool.json``),
    each with ``name`` (``worker-<pool>-<n>``) and ``live``: whether the process that
    wrote it still runs."""
    pattern = re.compile(rf"^worker-{re.escape(pool)}-\d+{re.escape(POOL_STATE_SUFFIX)}$")
    states = []
    for path in sorted(run_dir.glob(f"worker-{pool}-*{POOL_STATE_SUFFIX}")):
        if not pattern.match(path.name):
            continue
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(state, dict):
            pid = _int(state.get("pid"))
            name = path.name.removesuffix(POOL_STATE_SUFFIX)  # the supervisor's name for it
            states.append({**state, "name": name, "live": pid is not None and process_alive(pid)})
    return states


def pool_figures(
    states: Iterable[Mapping[str, Any]], now: float, window: float = REQUEST_WINDOW_SECONDS
) -> PoolStatus:
    """A pool's cache figures from its workers' states (:func:`read_pool_states`):
    the versions the live ones hold, the counts of every one, the rates over the
    last ``window`` seconds and the load time's percentiles over the loads they
    remember. Workers and decisions are the caller's to add."""
    figures = PoolStatus(window_seconds=window, loads=0, evictions=0, refusals=0)
    load_times: list[float] = []
    recent = {"load": 0, "evict": 0}
    for state in states:
        figures.budget_mib = _float(state.get("budget_mib"))
        figures.device_budget_mib = _float(state.get("device_budget_mib"))
        for count in ("loads", "evictions", "refusals"):
            setattr(figures, count, getattr(figures, count) + (_int(state.get(count)) or 0))
        worker = str(state.get("name") or state.get("worker") or "?")
        if state.get("live"):
            figures.held_mib[worker] = _float(state.get("held_mib")) or 0.0
            for entry in state.get("resident") or []:
                if isinstance(entry, dict):
                    figures.resident.append(
                        ResidentVersion(
                            model=str(entry.get("model")),
                            version=str(entry.get("version")),
                            worker=worker,
                            footprint_mib=_float(entry.get("footprint_mib")),
                            device_footprint_mib=_float(entry.get("device_footprint_mib")),
                            last_used=_float(entry.get("last_used")),
                            uses=_int(entry.get("uses")),
                        )
                    )
        for event in state.get("recent") or []:
            if not isinstance(event, dict) or event.get("kind") not in recent:
                continue
            if event["kind"] == "load" and (seconds := _float(event.get("load_seconds"))):
                load_times.append(seconds)
            at = _float(event.get("at"))
            if at is not None and now - window <= at <= now + 1:
                recent[event["kind"]] += 1
    figures.resident.sort(key=lambda r: r.last_used or 0.0, reverse=True)
    figures.loads_per_minute = round(recent["load"] * 60 / window, 2)
    figures.evictions_per_minute = round(recent["evict"] * 60 / window, 2)
    if load_times:
        figures.load_p50_seconds = round(_percentile(load_times, 50), 3)
        figures.load_p99_seconds = round(_percentile(load_times, 99), 3)
    return figures


def loads_by_model(states: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many times a pool's workers (of this run) loaded each model's versions."""
    counts: dict[str, int] = {}
    for state in states:
        for model, n in (state.get("loads_by_model") or {}).items():
            counts[str(model)] = counts.get(str(model), 0) + (_int(n) or 0)
    return counts


def _percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, nearest rank."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(len * q / 100), at least 1
    return ordered[int(rank) - 1]


def _processes_with_ready_files() -> dict[int, str]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ready = _ready_file_of(entry.name)
            if ready:
                out[int(entry.name)] = ready
    return out


# -- CloudWatch --------------------------------------------------------------------

_QUEUE_METRICS = {
    "visible": "ApproximateNumberOfMessagesVisible",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "oldest_age_seconds": "ApproximateAgeOfOldestMessage",
}


def metric_data(
    cloudwatch: Any, queries: list[dict[str, Any]], start: dt.datetime, end: dt.datetime
) -> dict[str, list[tuple[dt.datetime, float]]]:
    """Query id -> [(timestamp, value)], newest first, over every page."""
    out: dict[str, list[tuple[dt.datetime, float]]] = {}
    for i in range(0, len(queries), 500):  # GetMetricData's limit per call
        kwargs: dict[str, Any] = {
            "MetricDataQueries": queries[i : i + 500],
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampDescending",
        }
        while True:
            page = cloudwatch.get_metric_data(**kwargs)
            for result in page.get("MetricDataResults", []):
                points = out.setdefault(result["Id"], [])
                points.extend(
                    (ts, float(v))
                    for ts, v in zip(
                        result.get("Timestamps", []), result.get("Values", []), strict=False
                    )
                    if v is not None
                )
            token = page.get("NextToken")
            if not token:
                break
            kwargs["NextToken"] = token
    for points in out.values():
        points.sort(key=lambda p: p[0], reverse=True)
    return out


def queue_figures(
    cloudwatch: Any, queues: Mapping[str, Mapping[str, str]], now: float, lookback: float = 600
) -> dict[str, dict[str, LaneFigures]]:
    """Each queue's newest SQS metrics (``queues``: model -> lane -> queue name).

    The emulator answers them live; AWS publishes them once a minute, so there they
    are a minute or two old, and a queue idle for hours may have none (None then)."""
    queries, keys = [], {}
    for model, lanes in queues.items():
        for lane, name in lanes.items():
            for figure, metric in _QUEUE_METRICS.items():
                query_id = f"q{len(queries)}"
                keys[query_id] = (model, lane, figure)
                queries.append(
                    {
                        "Id": query_id,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": SQS_NAMESPACE,
                                "MetricName": metric,
                                "Dimensions": [{"Name": "QueueName", "Value": name}],
                            },
                            "Period": 60,
                            "Stat": "Maximum",
                        },
                    }
                )
    out = {model: {lane: LaneFigures() for lane in lanes} for model, lanes in queues.items()}
    if not queries:
        return out
    points = metric_data(
        cloudwatch,
        queries,
        dt.datetime.fromtimestamp(now - lookback, dt.UTC),
        dt.datetime.fromtimestamp(now + 60, dt.UTC),
    )
    for query_id, (model, lane, figure) in keys.items():
        found = points.get(query_id)
        if found:
            value = found[0][1]
            lane_figures = out[model][lane]
            if figure == "oldest_age_seconds":
                lane_figures.oldest_age_seconds = round(value, 1)
            else:
                setattr(lane_figures, figure, int(value))
    return out


def request_figures(
    cloudwatch: Any, models: Iterable[str], now: float, window: float = 300
) -> dict[str, RequestFigures]:
    """The router's EMF metrics per model over the last ``window`` seconds: one
    period the length of the window, so that its percentiles are the window's.
    Percentiles are asked for on their own, so that a CloudWatch that cannot compute
    them (the emulator's) still gives the counts."""
    models = list(models)
    period = max(60, int(window) // 60 * 60)
    out = {model: RequestFigures(window_seconds=period) for model in models}
    start = dt.datetime.fromtimestamp(now - period, dt.UTC)
    end = dt.datetime.fromtimestamp(now, dt.UTC)
    counts = {"count": ("Requests", "Sum"), "errors": ("Errors", "Sum")}
    percentiles = {"p50_ms": ("Latency", "p50"), "p99_ms": ("Latency", "p99")}
    for stats in (counts, percentiles):
        queries, keys = [], {}
        for model in models:
            for figure, (metric, stat) in stats.items():
                query_id = f"r{len(queries)}"
                keys[query_id] = (model, figure)
                queries.append(
                    {
                        "Id": query_id,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": METRICS_NAMESPACE,
                                "MetricName": metric,
                                "Dimensions": [{"Name": "model", "Value": model}],
                            },
                            "Period": period,
                            "Stat": stat,
                        },
                    }
                )
        if not queries:
            continue
        try:
            points = metric_data(cloudwatch, queries, start, end)
        except Exception:  # noqa: BLE001 - percentiles unsupported: the counts still stand
            if stats is counts:
                raise
            continue
        for query_id, (model, figure) in keys.items():
            found = points.get(query_id, [])
            if stats is counts:
                setattr(out[model], figure, int(sum(v for _, v in found)))
            elif found:  # the oldest period: the whole window, not its ragged end
                setattr(out[model], figure, round(found[-1][1], 1))
    for figures in out.values():
        if figures.count is not None:
            figures.per_second = round(figures.count / period, 3)
    return out


# -- the local platform ------------------------------------------------------------


class LocalStatusReader:
    """The local platform's status, from its run folder and its emulator.

    Keep one for repeated reads (the dashboard, ``--watch``): it reads the router's
    log on from where it stopped."""

    def __init__(
        self,
        run_dir: Path,
        info: Mapping[str, Any],
        *,
        cloudwatch: Any,
        sqs: Any = None,
        request_window: float = REQUEST_WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._run_dir = run_dir
        self._queue_urls: dict[str, dict[str, str]] = {
            model: dict(lanes) for model, lanes in info["queues"].items()
        }
        # Each worker service's models (a platform record without them: a service
        # per model), and each pool's settings.
        services = info.get("services") or {m: [m] for m in self._queue_urls}
        self._service_of = {m: str(s) for s, models in services.items() for m in models}
        self._pools: dict[str, Mapping[str, Any]] = dict(info.get("pools") or {})
        self._cloudwatch = cloudwatch
        self._sqs = sqs
        self._window_seconds = request_window
        self._clock = clock
        self._requests = MetricsWindow(
            run_dir / "logs" / "router.log",
            request_window,
            totals=True,
            tail_bytes=ROUTER_LOG_TAIL_BYTES,
        )

    @classmethod
    def for_run_dir(cls, run_dir: Path, **kwargs: Any) -> LocalStatusReader:
        from switchyard import aws

        info = json.loads((run_dir / "platform.json").read_text())
        region, url = info["region"], info["emulator_url"]
        return cls(
            run_dir,
            info,
            cloudwatch=aws.client("cloudwatch", region, url),
            sqs=aws.client("sqs", region, url),
            **kwargs,
        )

    @property
    def models(self) -> list[str]:
        return list(self._queue_urls)

    def read(self) -> Status:
        now = self._clock()
        scaling, services, fresh = read_scaling_state(self._run_dir / SCALING_FILE, now)
        models = {
            model: ModelStatus(pool=self._service_of[model] if self._in_pool(model) else None)
            for model in self._queue_urls
        }
        observe = [m for m in models if not (fresh and m in scaling)]
        if observe:
            self._observe(models, observe, now)
        for model, status in models.items():
            entry = scaling.get(model)
            if entry is None:
                continue
            status.last_decision, status.last_change = entry.last_decision, entry.last_change
            if fresh:
                status.workers, status.lanes = entry.workers, entry.lanes
                status.idle_seconds, status.source = entry.idle_seconds, "supervisor"
        self._requests.poll(now)
        since = now - self._window_seconds
        for model, status in models.items():
            status.requests = RequestFigures.from_stats(
                self._requests.overall(model, since), self._window_seconds
            )
        for model, status in models.items():
            status.engine = read_engine(self._run_dir, self._service_of.get(model, model), model)
        pools = self._read_pools(models, services if fresh else {}, now)
        return Status(at=now, substrate="local", models=models, pools=pools)

    def _in_pool(self, model: str) -> bool:
        return self._service_of.get(model, model) in self._pools

    def _read_pools(
        self, models: dict[str, ModelStatus], services: dict[str, ScalingEntry], now: float
    ) -> dict[str, PoolStatus]:
        """Each pool's figures: its workers' states, its service's workers and
        decisions (the supervisor's, else as observed), and its models' cold loads."""
        pools = {}
        observed = observe_workers(self._run_dir, [p for p in self._pools if p not in services])
        for pool, spec in self._pools.items():
            states = read_pool_states(self._run_dir, pool)
            figures = pool_figures(states, now, self._window_seconds)
            figures.models = [m for m, s in self._service_of.items() if s == pool]
            figures.budget_mib = _float(spec.get("memory_budget_mib")) or figures.budget_mib
            figures.device_budget_mib = (
                _float(spec.get("device_memory_budget_mib")) or figures.device_budget_mib
            )
            entry = services.get(pool)
            if entry is not None:
                figures.workers, figures.source = entry.workers, "supervisor"
                figures.last_decision, figures.last_change = entry.last_decision, entry.last_change
            else:
                figures.workers, figures.source = observed[pool], "observed"
            cold = loads_by_model(states)
            for model in figures.models:
                if model in models:
                    models[model].cold_loads = cold.get(model, 0)
            pools[pool] = figures
        return pools

    def _observe(self, models: dict[str, ModelStatus], observe: list[str], now: float) -> None:
        names = {
            m: {lane: url.rsplit("/", 1)[-1] for lane, url in self._queue_urls[m].items()}
            for m in observe
        }
        try:
            lanes = queue_figures(self._cloudwatch, names, now)
        except Exception:  # noqa: BLE001 - an emulator without live SQS metrics
            lanes = {m: {lane: LaneFigures() for lane in names[m]} for m in observe}
        workers = observe_workers(self._run_dir, {self._service_of.get(m, m) for m in observe})
        for model in observe:
            for lane, figures in lanes[model].items():
                if figures.visible is None and self._sqs is not None:
                    self._queue_attributes(self._queue_urls[model][lane], figures)
            models[model].lanes = lanes[model]
            models[model].workers = workers[self._service_of.get(model, model)]
            models[model].source = "observed"

    def _queue_attributes(self, url: str, figures: LaneFigures) -> None:
        with contextlib.suppress(Exception):
            attrs = self._sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            figures.visible = int(attrs["ApproximateNumberOfMessages"])
            figures.in_flight = int(attrs["ApproximateNumberOfMessagesNotVisible"])
