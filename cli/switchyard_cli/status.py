"""``switchyard status``: a deployed stage's reader, and the table both substrates'
status is printed as.

:class:`AwsStatusReader` fills the same :class:`~switchyard_local.status.Status`
as the local platform's reader (``switchyard_local.status.LocalStatusReader``),
so that the command and its ``--json`` say the same thing whichever substrate they
look at: queue figures from CloudWatch's SQS metrics, request figures from the
router's EMF metrics (namespace ``Switchyard``, dimension ``model``), workers from
ECS (the worker service's running, pending and desired counts) and the last
decision from Application Auto Scaling's newest scaling activity on that service.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.manifest import MODEL_TAG, ResourceNames
from switchyard.schemas import LANES
from switchyard_local.status import (
    LaneFigures,
    ModelStatus,
    Status,
    WorkerFigures,
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
    ecs: Any, names: ResourceNames, models: Iterable[str]
) -> dict[str, WorkerService]:
    """Each model's ECS worker service in the stage.

    The CDK app leaves the cluster's and the services' names to CloudFormation, so
    they are found the way CloudFormation names them: the cluster by its generated
    name's prefix (stack name and logical id), a service inside it by a
    ``switchyard:model`` tag when it has one, else by the logical id in its name.
    A service renamed by hand, or a stack deployed under another name, is not found.
    """
    models = list(models)
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
        request_window: float = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._names = names
        self._models = list(models)
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
            self._services = find_worker_services(self._ecs, self._names, self._models)
        models = {}
        for model in self._models:
            status = ModelStatus(lanes=lanes[model], requests=requests[model], source="aws")
            service = self._services.get(model)
            if service is not None:
                status.workers = self._workers(service)
                status.last_decision = self._last_decision(service)
            else:
                status.source = "aws (no worker service found)"
            models[model] = status
        return Status(at=now, substrate="aws", models=models)

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
    observed = [m for m, s in status.models.items() if s.source == "observed"]
    if observed:
        lines.append("")
        lines.append(
            "the supervisor's scaling file is missing or stale: queues and workers of "
            f"{', '.join(observed)} as observed now (no desired count)"
        )
    return "\n".join(lines)
