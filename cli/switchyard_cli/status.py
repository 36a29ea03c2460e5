"""``switchyard status``: a deployed stage's reader, and the table both substrates'
status is printed as.

:class:`AwsStatusReader` fills the same :class:`~switchyard_local.status.Status`
as the local platform's reader (``switchyard_local.status.LocalStatusReader``),
so that the command and its ``--json`` say the same thing whichever substrate they
look at: queue figures from CloudWatch's SQS metrics, request figures from the
router's EMF metrics (namespace ``Switchyard``, dimension ``model``), workers from
ECS (the worker service's running, pending and desired counts) and the last
decision from Application Auto Scaling's newest scaling activity on that service.
A pool's figures come from its workers' EMF metrics (dimension ``pool``: loads,
evictions, load time, resident memory and versions) and its ECS service, found by
its ``switchyard:pool`` tag; which versions each task holds is not a metric, so the
deployed reader lists none.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.manifest import MODEL_TAG, POOL_TAG, ResourceNames
from switchyard.schemas import LANES
from switchyard.telemetry import NAMESPACE as METRICS_NAMESPACE
from switchyard_local.status import (
    LaneFigures,
    ModelStatus,
    PoolStatus,
    Status,
    WorkerFigures,
    metric_data,
    normalise_decision,
    queue_figures,
    request_figures,
)

# -- a deployed stage --------------------------------------------------------------


def _logical_id(*path: str) -> str:
    """The readable part of the logical id the CDK gives a construct path: its
    components' letters and digits, consecutive duplicates dropped ("Service" in
    ``Worker/Service/Service``), as CDK's ``makeUniqueId`` does."""
    parts: list[str] = []
    for component in path:
        if not parts or parts[-1] != component:
            parts.append(component)
    return "".join(re.sub(r"[^A-Za-z0-9]", "", p) for p in parts)


def serving_stack(names: ResourceNames) -> str:
    """The serving stack's name (``stacks.app.add_platform``)."""
    return f"{names.base}-serving"


def cluster_name_prefix(names: ResourceNames) -> str:
    """What CloudFormation's generated name of the worker cluster starts with
    (``<stack>-<logical id><hash>-<suffix>``; ``Compute/Cluster`` in the stack)."""
    return f"{serving_stack(names)}-{_logical_id('Compute', 'Cluster')}"


def service_name_marker(model: str) -> str:
    """What CloudFormation's generated name of a model's worker service contains
    (``Model-<model>/Worker/Service`` in the stack: ``stacks.endpoint``)."""
    return f"-{_logical_id(f'Model-{model}', 'Worker', 'Service')}"


@dataclass(frozen=True)
class WorkerService:
    cluster: str  # name
    service: str  # name


def find_worker_services(
    ecs: Any, names: ResourceNames, models: Iterable[str], pools: Iterable[str] = ()
) -> dict[str, WorkerService]:
    """Each model's ECS worker service in the stage, and each pool's (by its tag).

    The CDK app leaves the cluster's and the services' names to CloudFormation, so
    they are found the way CloudFormation names them: the cluster by its generated
    name's prefix (stack name and logical id), a service inside it by a
    ``switchyard:model`` tag when it has one, else by the logical id in its name.
    A service renamed by hand, or a stack deployed under another name, is not found.
    """
    models, pools = list(models), list(pools)
    prefix = cluster_name_prefix(names)
    clusters = [
        arn
        for page in ecs.get_paginator("list_clusters").paginate()
        for arn in page.get("clusterArns", [])
        if arn.rsplit("/", 1)[-1].startswith(prefix)
    ]
    found: dict[str, WorkerService] = {}
    for cluster in clusters:
        arns = [
            arn
            for page in ecs.get_paginator("list_services").paginate(cluster=cluster)
            for arn in page.get("serviceArns", [])
        ]
        for i in range(0, len(arns), 10):  # DescribeServices takes ten at a time
            described = ecs.describe_services(
                cluster=cluster, services=arns[i : i + 10], include=["TAGS"]
            )["services"]
            for service in described:
                if service.get("status") == "INACTIVE":  # deleted; described for a while
                    continue
                tags = {t.get("key"): t.get("value") for t in service.get("tags") or []}
                name = service["serviceName"]
                pool = tags.get(POOL_TAG)
                if pool in pools:
                    found.setdefault(pool, WorkerService(cluster.rsplit("/", 1)[-1], name))
                    continue
                for model in models:
                    if tags.get(MODEL_TAG) == model or (
                        MODEL_TAG not in tags and service_name_marker(model) in name
                    ):
                        found.setdefault(model, WorkerService(cluster.rsplit("/", 1)[-1], name))
    return found


def scaling_activity_decision(activity: Mapping[str, Any]) -> dict[str, Any]:
    """A scaling activity of Application Auto Scaling as a decision: its
    description says the count it set ("Setting desired count to 2."), its cause
    the alarm and policy that asked."""
    description = activity.get("Description", "")
    match = re.search(r"desired count to (\d+)", description)
    started = activity.get("StartTime")
    return normalise_decision(
        {
            "at": started.timestamp() if isinstance(started, dt.datetime) else started,
            "action": activity.get("StatusCode"),
            "desired": int(match.group(1)) if match else None,
            "reason": activity.get("Cause") or description,
            "description": description,
        }
    )


class AwsStatusReader:
    """A deployed stage's status, from CloudWatch, ECS and Application Auto Scaling."""

    def __init__(
        self,
        names: ResourceNames,
        models: Iterable[str],
        *,
        cloudwatch: Any,
        ecs: Any,
        autoscaling: Any,
        pools: Mapping[str, Iterable[str]] | None = None,
        request_window: float = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._names = names
        self._models = list(models)
        self._pools = {pool: list(members) for pool, members in (pools or {}).items()}
        self._pool_of = {m: pool for pool, members in self._pools.items() for m in members}
        self._cloudwatch = cloudwatch
        self._ecs = ecs
        self._autoscaling = autoscaling
        self._window = request_window
        self._clock = clock
        self._services: dict[str, WorkerService] | None = None

    def read(self) -> Status:
        now = self._clock()
        queues = {m: {lane: self._names.queue(m, lane) for lane in LANES} for m in self._models}
        lanes = queue_figures(self._cloudwatch, queues, now)
        requests = request_figures(self._cloudwatch, self._models, now, self._window)
        if self._services is None:
            self._services = find_worker_services(self._ecs, self._names, self._models, self._pools)
        pools = pool_metrics(self._cloudwatch, self._pools, now, self._window)
        models = {}
        for model in self._models:
            status = ModelStatus(lanes=lanes[model], requests=requests[model], source="aws")
            pool = self._pool_of.get(model)
            if pool is not None:
                status.pool = pool
                status.cold_loads = pools[pool].loads_by_model.get(model)
            service = self._services.get(pool or model)
            if service is not None:
                status.workers = self._workers(service)
                status.last_decision = self._last_decision(service)
            else:
                status.source = "aws (no worker service found)"
            models[model] = status
        out = {}
        for pool, figures in pools.items():
            service = self._services.get(pool)
            status = figures.status
            status.models = self._pools[pool]
            if service is not None:
                status.workers = self._workers(service)
                status.last_decision = self._last_decision(service)
                status.source = "aws"
            else:
                status.source = "aws (no worker service found)"
            out[pool] = status
        return Status(at=now, substrate="aws", models=models, pools=out)

    def _workers(self, service: WorkerService) -> WorkerFigures:
        found = self._ecs.describe_services(cluster=service.cluster, services=[service.service])
        for item in found.get("services", []):
            return WorkerFigures(
                running=item.get("runningCount"),
                starting=item.get("pendingCount"),
                desired=item.get("desiredCount"),
            )
        return WorkerFigures()

    def _last_decision(self, service: WorkerService) -> dict[str, Any] | None:
        try:
            activities = self._autoscaling.describe_scaling_activities(
                ServiceNamespace="ecs",
                ResourceId=f"service/{service.cluster}/{service.service}",
                MaxResults=1,
            ).get("ScalingActivities", [])
        except Exception:  # noqa: BLE001 - no activity to show is not a failure of status
            return None
        return scaling_activity_decision(activities[0]) if activities else None


@dataclass
class PoolMetrics:
    """A pool's figures from CloudWatch, and each of its models' loads (cold loads)."""

    status: PoolStatus
    loads_by_model: dict[str, int]


def _pool_query(
    query_id: str, pool: str, metric: str, stat: str, period: int, model: str | None = None
) -> dict[str, Any]:
    dimensions = [{"Name": "pool", "Value": pool}]
    if model is not None:
        dimensions.append({"Name": "model", "Value": model})
    metric_named = {"Namespace": METRICS_NAMESPACE, "MetricName": metric, "Dimensions": dimensions}
    return {"Id": query_id, "MetricStat": {"Metric": metric_named, "Period": period, "Stat": stat}}


def pool_metrics(
    cloudwatch: Any, pools: Mapping[str, Iterable[str]], now: float, window: float = 300
) -> dict[str, PoolMetrics]:
    """Each pool's workers' metrics over the last ``window`` seconds (one period):
    loads and evictions (counts and per minute), refusals, the load time's p50 and
    p99, and each model's loads."""
    period = max(60, int(window) // 60 * 60)
    out = {pool: PoolMetrics(PoolStatus(window_seconds=period), {}) for pool in pools}
    counts: dict[str, tuple[str, str, str | None]] = {}  # query id -> pool, metric, model
    queries = []
    for pool, members in pools.items():
        for metric, model in [
            ("ModelLoads", None),
            ("ModelEvictions", None),
            ("ModelLoadRefusals", None),
            *(("ModelLoads", m) for m in members),
        ]:
            query_id = f"c{len(queries)}"
            counts[query_id] = (pool, metric, model)
            queries.append(_pool_query(query_id, pool, metric, "Sum", period, model))
    if not queries:
        return out
    start = dt.datetime.fromtimestamp(now - period, dt.UTC)
    end = dt.datetime.fromtimestamp(now, dt.UTC)
    points = metric_data(cloudwatch, queries, start, end)
    for query_id, (pool, metric, model) in counts.items():
        total = sum(v for _, v in points.get(query_id, []))
        figures = out[pool]
        if model is not None:
            figures.loads_by_model[model] = int(total)
        elif metric == "ModelLoads":
            figures.status.loads = int(total)
            figures.status.loads_per_minute = round(total * 60 / period, 2)
        elif metric == "ModelEvictions":
            figures.status.evictions = int(total)
            figures.status.evictions_per_minute = round(total * 60 / period, 2)
        else:
            figures.status.refusals = int(total)
    # Percentiles asked for on their own: a CloudWatch that cannot compute them (the
    # emulator's) still gives the counts.
    timed: dict[str, tuple[str, str]] = {}  # query id -> pool, statistic
    for pool in pools:
        for stat in ("p50", "p99"):
            timed[f"t{len(timed)}"] = (pool, stat)
    try:
        found = metric_data(
            cloudwatch,
            [
                _pool_query(query_id, pool, "ModelLoadTime", stat, period)
                for query_id, (pool, stat) in timed.items()
            ],
            start,
            end,
        )
    except Exception:  # noqa: BLE001 - no percentiles: the counts still stand
        return out
    for query_id, (pool, stat) in timed.items():
        if found.get(query_id):  # milliseconds, the oldest period: the whole window
            seconds = round(found[query_id][-1][1] / 1000, 3)
            setattr(out[pool].status, f"load_{stat}_seconds", seconds)
    return out


# -- text ----------------------------------------------------------------------------


def _cell(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{suffix}" if value < 100 else f"{value:.0f}{suffix}"
    return f"{value}{suffix}"


def _clock_time(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else "?"


def format_decision(decision: Mapping[str, Any] | None) -> str:
    """``21:14:03 scale_out → 3: <reason>``."""
    if decision is None:
        return "none yet"
    desired = f" → {decision['desired']}" if decision.get("desired") is not None else ""
    return (
        f"{_clock_time(decision.get('at'))} {decision.get('action') or '?'}{desired}: "
        f"{decision.get('reason') or ''}"
    )


def format_status(status: Status) -> str:
    """The status as a table, one row per model, then each model's last decision."""
    name_width = max([len("MODEL"), *(len(m) for m in status.models)])
    window = next(iter(status.models.values())).requests.window_seconds if status.models else 60
    head = (
        f"{'':<{name_width}}  {'workers':^17}  {'realtime queue':^23}  {'batch queue':^23}  "
        f"{f'requests, last {window:.0f} s':^30}"
    )
    sub = (
        f"{'MODEL':<{name_width}}  {'run':>5}{'start':>6}{'want':>6}  "
        + f"{'visible':>8}{'flight':>7}{'oldest':>8}  " * 2
        + f"{'per s':>7}{'p50 ms':>8}{'p99 ms':>8}{'errors':>7}"
    )
    lines = [head.rstrip(), sub]
    for model, s in status.models.items():
        row = (
            f"{model:<{name_width}}  {_cell(s.workers.running):>5}{_cell(s.workers.starting):>6}"
            f"{_cell(s.workers.desired):>6}  "
        )
        for lane in LANES:
            f = s.lanes.get(lane, LaneFigures())
            row += (
                f"{_cell(f.visible):>8}{_cell(f.in_flight):>7}"
                f"{_cell(f.oldest_age_seconds, ' s'):>8}  "
            )
        r = s.requests
        row += (
            f"{_cell(r.per_second):>7}{_cell(r.p50_ms):>8}{_cell(r.p99_ms):>8}{_cell(r.errors):>7}"
        )
        lines.append(row)
    lines.append("")
    lines.append("last scaling decision (and the last that changed the count):")
    for model, s in status.models.items():
        if s.last_decision is None and s.last_change is None:
            lines.append(f"  {model:<{name_width}}  none yet")
            continue
        lines.append(f"  {model:<{name_width}}  {format_decision(s.last_decision)}")
        if s.last_change is not None and s.last_change != s.last_decision:
            lines.append(f"  {'':<{name_width}}  {format_decision(s.last_change)}")
    engines = {m: s.engine for m, s in status.models.items() if s.engine}
    if engines:
        lines.append("")
        lines.append("generation engine (what the live workers decode with):")
        for model, engine in engines.items():
            lines.append(f"  {model:<{name_width}}  {engine}")
    for line in format_pools(status):
        lines.append(line)
    for line in format_budget_flags(status.budgets):
        lines.append(line)
    observed = [m for m, s in status.models.items() if s.source == "observed"]
    if observed:
        lines.append("")
        lines.append(
            "the supervisor's scaling file is missing or stale: queues and workers of "
            f"{', '.join(observed)} as observed now (no desired count)"
        )
    return "\n".join(lines)


def format_budget_flags(budgets: list[dict[str, Any]]) -> list[str]:
    """The budgeted tenants' months, each flagged from 80 % of its budget."""
    if not budgets:
        return []
    lines = ["", f"budgets, {budgets[0]['month']} (switchyard budget show):"]
    for b in budgets:
        used = "all" if b["used"] is None else f"{100 * b['used']:.1f} %"
        flag = "  OVER: new work refused or batched" if b["over"] else ""
        flag = flag or ("  WARN: over 80 %" if b["warn"] else "")
        lines.append(
            f"  {b['tenant']:<12} ${b['spent_usd']:.4f} of ${b['budget_usd']:.2f}  {used}{flag}"
        )
    return lines


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} MiB"


def format_pools(status: Status) -> list[str]:
    """Each pool: its workers, what they hold against the budget, its loads and
    evictions, the load time, and its models' cold loads."""
    lines: list[str] = []
    for pool, p in status.pools.items():
        w = p.workers
        per = f"{p.window_seconds:.0f} s"
        budget = _mib(p.budget_mib) + (
            f", GPU {_mib(p.device_budget_mib)}" if p.device_budget_mib else ""
        )
        lines += [
            "",
            f"pool {pool}: {', '.join(p.models)}",
            f"  workers   {_cell(w.running)} running, {_cell(w.starting)} starting, "
            f"{_cell(w.desired)} wanted; budget {budget} per worker",
            f"  loads     {_cell(p.loads)} ({_cell(p.loads_per_minute)}/min over {per}), "
            f"evictions {_cell(p.evictions)} ({_cell(p.evictions_per_minute)}/min), "
            f"refused {_cell(p.refusals)}",
            f"  load time p50 {_ms(p.load_p50_seconds)}, p99 {_ms(p.load_p99_seconds)}",
        ]
        for worker, held in p.held_mib.items():
            mine = [r for r in p.resident if r.worker == worker]
            held_versions = ", ".join(
                f"{r.model} {r.version} {_mib(r.footprint_mib)}" for r in mine
            )
            lines.append(f"  {worker} holds {_mib(held)}: {held_versions or 'nothing'}")
        if not p.held_mib and p.resident:
            lines.append(
                "  holds: "
                + ", ".join(f"{r.model} {r.version} {_mib(r.footprint_mib)}" for r in p.resident)
            )
        cold = [
            f"{m} {s.cold_loads}"
            for m, s in status.models.items()
            if s.pool == pool and s.cold_loads is not None
        ]
        if cold:
            lines.append(f"  cold loads per model: {', '.join(cold)}")
        if p.last_decision is not None:
            lines.append(f"  last scaling decision: {format_decision(p.last_decision)}")
    return lines
