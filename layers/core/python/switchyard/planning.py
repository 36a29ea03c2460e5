"""A capacity plan: what a traffic profile needs of the platform and of the AWS
account, what it costs a month, and a check of both by replaying its day through
the scaling rule (``switchyard plan``; docs/capacity.md works two profiles).

The arithmetic, per worker service (a model's own, or a pool's):

- **Workers.** One worker answers ``worker_rps`` requests a second at full batches
  (a measured figure, or its batch's compute time). At the peak the service needs
  ``ceil(peak × (1 + shadow share) / worker_rps)`` workers, and its maximum is that
  with the profile's headroom; its minimum is the policy's ``min_tasks``. A worker
  runs on one host of its instance type (one task a host, ``stacks.cloud.TASK_SIZE``),
  so the GPU or standard vCPUs quota needs the maximum times the type's vCPUs.
- **Routers.** By Little's law a router holds ``rate × time`` invocations at once: a
  sync request for its whole answer, an async one and each poll for the path's
  overhead. A sync answer takes the profile's ``latency_ms``, or the path's overhead,
  the batch forming (``max_wait_ms``, or less where a full batch arrives sooner), the
  batch in progress and its own: a ceiling, as a reservation should be.
- **Requests.** Per message: one SQS send (each 64 KB of the body a request), a
  share of a receive and of a delete batch (10 messages a call, one batch filled
  as the load allows), one result written (1 KB write units) and read by the
  router's looks (4 KB read units), a line of its batch's prediction-log record
  (Firehose bills a record rounded up to 5 KB); the tenants' caps (a sync
  request's slot taken and given back, an async one's place in queued work counted
  and given back, :func:`admission_writes`); an idle worker's empty receives
  (docs/benchmarks.md, section 5).
- **Money.** A month is 730 hours; requests at the mean rate; workers as the replay
  ran them (started, running, idle: all paid).

The check is :func:`switchyard.scaling_replay.replay`: each service's day (after a
warm-up day) through :func:`switchyard.scaling.decide` with its policy and the
maximum above, starting workers after their start delay. It gives the p99 queue
wait (by requests), the worker-hours and the idle ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import annotated_types

from switchyard.costs import SYNC_SLOT_WRITES, log_billed_bytes
from switchyard.manifest import UNRESERVED_CONCURRENCY_MINIMUM, Manifest, ScalingSettings
from switchyard.prices import PRICE_SOURCES, PRICES_AS_OF, cost
from switchyard.quotas import INSTANCE_VCPUS, Quota, host_quota
from switchyard.scaling import ScalingPolicy
from switchyard.scaling_replay import (
    ReplayResult,
    ReplaySettings,
    ServiceLoad,
    WaitDistribution,
    replay,
)
from switchyard.telemetry import LOG_LINES_PER_RECORD
from switchyard.traffic_profile import (
    ModelLoad,
    Profile,
    ProfileError,
    SimulationSettings,
    load_profile,
    resolve,
)

HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
SQS_CHUNK_BYTES = 64 * 1024  # SQS bills each 64 KB of a payload as a request
SQS_BATCH = 10  # messages a receive or a delete batch takes
GIB = 1024**3


def admission_writes(requests: float, sync_share: float, batches: float) -> float:
    """The write units of tenants' caps (``switchyard.admission``; every tier caps):
    a sync request's slot taken and given back by the router; an async request's
    place in queued work counted by the router, and given back by the worker, one
    write a batch (its requests of one tenant and model together)."""
    other = 1 - sync_share
    return requests * (sync_share * SYNC_SLOT_WRITES + other) + batches * other


def max_tasks_bound() -> int:
    """The most workers a service may have in the cloud (the manifest's bound: one
    step adjustment per count in the rendered scaling policy)."""
    for rule in ScalingSettings.model_fields["max_tasks"].metadata:
        if isinstance(rule, annotated_types.Le):
            return int(rule.le)  # type: ignore[call-overload]
    raise LookupError("ScalingSettings.max_tasks has no upper bound")


@dataclass(frozen=True)
class ServicePlan:
    """One worker service: its workers, and its day as the rule ran it."""

    service: str
    models: tuple[str, ...]
    compute: str
    instance_type: str
    vcpus_per_worker: int
    peak_rps: float  # with shadow copies
    mean_rps: float
    worker_rps: float  # at the peak's mix of models
    needed_at_peak: int
    min_workers: int
    max_workers: int
    manifest_max_tasks: int | None
    start_delay_seconds: float
    policy: ScalingPolicy
    replay: ReplayResult  # a day like the one before (after the warm-up)
    first_day: ReplayResult  # the first day, from the minimum (after a deploy)
    usd_per_worker_hour: float

    @property
    def p99_wait_seconds(self) -> float:
        return self.replay.waits.quantile(0.99)

    @property
    def usd_per_month(self) -> float:
        return self.replay.worker_hours * HOURS_PER_MONTH / 24 * self.usd_per_worker_hour

    @property
    def idle_usd_per_month(self) -> float:
        return self.replay.idle_hours * HOURS_PER_MONTH / 24 * self.usd_per_worker_hour


@dataclass(frozen=True)
class ModelPlan:
    """One model's router and queue."""

    model: str
    service: str
    peak_rps: float
    mean_rps: float
    api_peak_rps: float  # its calls, async polls included
    router_ms: float  # a sync request's time in its router
    reserved_concurrency: int  # at the peak, with headroom
    messages_per_batch: int
    batch_fill: float  # messages a batch takes at the mean load
    batch_seconds: float
    backlog_per_task: int
    backlog_seconds: float  # a backlog of backlog_per_task: this much of one worker's time
    in_flight_at_max: int  # messages received and not deleted, every worker busy
    visibility_timeout_seconds: int


@dataclass
class Plan:
    """The whole plan (``switchyard plan``'s output, as numbers)."""

    profile: str
    description: str
    stage: str
    headroom: float
    services: list[ServicePlan]
    models: list[ModelPlan]
    quotas: list[Quota]
    monthly: dict[str, float]  # count -> per month (requests, units, GB, hours)
    usd_per_month: dict[str, float]  # service -> USD
    waits: WaitDistribution
    simulation: SimulationSettings
    notes: list[str] = field(default_factory=list)

    @property
    def total_usd_per_month(self) -> float:
        return sum(self.usd_per_month.values())

    @property
    def worker_hours_per_day(self) -> float:
        return sum(s.replay.worker_hours for s in self.services)

    @property
    def idle_hours_per_day(self) -> float:
        return sum(s.replay.idle_hours for s in self.services)

    @property
    def idle_usd_per_month(self) -> float:
        return sum(s.idle_usd_per_month for s in self.services)

    @property
    def first_day_waits(self) -> WaitDistribution:
        return WaitDistribution.merged(s.first_day.waits for s in self.services)

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (``switchyard plan --json``)."""
        return {
            "profile": self.profile,
            "description": self.description,
            "stage": self.stage,
            "headroom": self.headroom,
            "services": [
                {
                    "service": s.service,
                    "models": list(s.models),
                    "compute": s.compute,
                    "instance_type": s.instance_type,
                    "peak_rps": _round(s.peak_rps),
                    "mean_rps": _round(s.mean_rps),
                    "worker_rps": _round(s.worker_rps),
                    "workers": {
                        "at_peak": s.needed_at_peak,
                        "min": s.min_workers,
                        "max": s.max_workers,
                        "manifest_max_tasks": s.manifest_max_tasks,
                    },
                    "vcpus_at_max": s.max_workers * s.vcpus_per_worker,
                    "policy": asdict(s.policy),
                    "start_delay_seconds": s.start_delay_seconds,
                    "simulated": {
                        "p99_queue_wait_seconds": _round(s.p99_wait_seconds),
                        "max_queue_wait_seconds": _round(s.replay.waits.maximum()),
                        "mean_queue_wait_seconds": _round(s.replay.waits.mean()),
                        "worker_hours_per_day": _round(s.replay.worker_hours),
                        "idle_worker_hours_per_day": _round(s.replay.idle_hours),
                        "peak_workers": s.replay.peak_workers,
                        "wakes": s.replay.wakes,
                        "scale_outs": s.replay.scale_outs,
                        "scale_ins": s.replay.scale_ins,
                        "unserved_at_end": _round(s.replay.unserved),
                        "first_day_from_minimum": {
                            "p99_queue_wait_seconds": _round(s.first_day.waits.quantile(0.99)),
                            "max_queue_wait_seconds": _round(s.first_day.waits.maximum()),
                            "worker_hours": _round(s.first_day.worker_hours),
                        },
                    },
                    "usd_per_month": _round(s.usd_per_month),
                    "idle_usd_per_month": _round(s.idle_usd_per_month),
                }
                for s in self.services
            ],
            "models": [
                {k: _round(v) if isinstance(v, float) else v for k, v in asdict(m).items()}
                for m in self.models
            ],
            "quotas": [{**asdict(q), "to_raise": q.to_raise} for q in self.quotas],
            "monthly": {k: _round(v) for k, v in self.monthly.items()},
            "usd_per_month": {
                **{k: _round(v) for k, v in self.usd_per_month.items()},
                "total": _round(self.total_usd_per_month),
            },
            "simulation": {
                "p99_queue_wait_seconds": _round(self.waits.quantile(0.99)),
                "max_queue_wait_seconds": _round(self.waits.maximum()),
                "worker_hours_per_day": _round(self.worker_hours_per_day),
                "idle_worker_hours_per_day": _round(self.idle_hours_per_day),
                "idle_usd_per_month": _round(self.idle_usd_per_month),
                "first_day_from_minimum": {
                    "p99_queue_wait_seconds": _round(self.first_day_waits.quantile(0.99)),
                    "max_queue_wait_seconds": _round(self.first_day_waits.maximum()),
                },
            },
            "prices": {"as_of": PRICES_AS_OF, "sources": PRICE_SOURCES},
            "notes": self.notes,
        }


def _round(value: float) -> float:
    return float(f"{value:.4g}") if abs(value) < 1e6 else round(value)


def plan_file(path: Path | str, manifest: Manifest | None) -> Plan:
    """The plan of the profile at ``path``, read against ``manifest`` (its models'
    compute, batch sizes, pools and scaling)."""
    path = Path(path)
    return make_plan(load_profile(path), manifest, path.parent, str(path))


def make_plan(
    profile: Profile, manifest: Manifest | None, where: Path, name: str = "profile"
) -> Plan:
    """The plan of ``profile`` (traces read from ``where``)."""
    for pool in profile.pools:
        if manifest is None or pool not in manifest.pools:
            raise ProfileError(f"pools.{pool}: no pool of the manifest")
    loads = resolve(profile, manifest, where)
    for load in loads:
        if load.instance_type not in INSTANCE_VCPUS:
            raise ProfileError(
                f"{load.name}: instance type {load.instance_type!r}: its vCPUs are unknown "
                "(switchyard.quotas.INSTANCE_VCPUS)"
            )
        if load.instance_type not in profile.prices.instances_per_hour:
            raise ProfileError(
                f"prices.instances_per_hour: no price for {load.instance_type!r} ({load.name})"
            )
    by_service: dict[str, list[ModelLoad]] = {}
    for load in loads:
        by_service.setdefault(load.service, []).append(load)
    settings = profile.simulation
    services = [
        _service_plan(profile, name_, members, settings.warmup_hours * 3600)
        for name_, members in by_service.items()
    ]
    served_by = {s.service: s for s in services}
    models = [_model_plan(profile, manifest, load, served_by[load.service]) for load in loads]
    monthly = _monthly_counts(profile, loads, models, served_by)
    usd = _monthly_usd(profile, monthly, services)
    quotas = _quotas(profile, manifest, loads, models, services)
    waits = WaitDistribution.merged(s.replay.waits for s in services)
    plan = Plan(
        profile=name,
        description=profile.description.strip(),
        stage=profile.stage,
        headroom=profile.headroom,
        services=services,
        models=models,
        quotas=quotas,
        monthly=monthly,
        usd_per_month=usd,
        waits=waits,
        simulation=profile.simulation,
    )
    plan.notes = _notes(plan, manifest, loads)
    return plan


def _ceil(x: float) -> int:
    """ceil, forgiving the float noise of a product that is a whole number."""
    return math.ceil(x - 1e-9)


def _service_plan(
    profile: Profile, service: str, members: list[ModelLoad], warmup_seconds: float
) -> ServicePlan:
    first = members[0]
    ticks = len(first.day)
    # Each tick's load, in requests/s and in workers' worth (models differ in speed).
    rates = [sum(m.day[k] * (1 + m.shadow_share) for m in members) for k in range(ticks)]
    busy = [
        sum(m.day[k] * (1 + m.shadow_share) / m.worker_rps for m in members) for k in range(ticks)
    ]
    peak_rps = sum(m.peak_rps * (1 + m.shadow_share) for m in members)
    if len(members) == 1:
        peak_workers = peak_rps / first.worker_rps
    else:
        peak_workers = max(busy)
        peak_rps = max(rates)
    mix_rps = peak_rps / peak_workers
    per_tick = [r / b if b > 0 else mix_rps for r, b in zip(rates, busy, strict=True)]
    needed = max(1, _ceil(peak_workers))
    planned_max = max(1, _ceil(peak_workers * (1 + profile.headroom)))
    values = dict(first.scaling)
    max_workers = values.pop("max_tasks", planned_max)
    min_workers = min(values.get("min_tasks", 0), max_workers)
    values["min_tasks"] = min_workers
    policy = ScalingPolicy(max_tasks=max_workers, **values)
    weights = [m.peak_rps * (1 + m.shadow_share) for m in members]
    batch_seconds = sum(w * m.batch_seconds for w, m in zip(weights, members, strict=True)) / (
        sum(weights) or 1
    )
    sim = profile.simulation
    load = ServiceLoad(
        rates, per_tick if len(members) > 1 else first.worker_rps, batch_seconds, policy
    )
    settings = ReplaySettings(
        start_delay_seconds=first.start_delay_seconds,
        tick_seconds=sim.tick_seconds,
        decide_every_seconds=sim.decide_every_seconds,
        warmup_seconds=warmup_seconds,
        arrivals=sim.arrivals,
        seed=sim.seed,
    )
    result = replay(load, settings, name=service)
    first_day = replay(load, replace(settings, warmup_seconds=0), name=service)
    return ServicePlan(
        service=service,
        models=tuple(m.name for m in members),
        compute=first.compute,
        instance_type=first.instance_type,
        vcpus_per_worker=INSTANCE_VCPUS[first.instance_type],
        peak_rps=peak_rps,
        mean_rps=sum(rates) / ticks,
        worker_rps=mix_rps,
        needed_at_peak=needed,
        min_workers=min_workers,
        max_workers=max_workers,
        manifest_max_tasks=first.manifest_max_tasks,
        start_delay_seconds=first.start_delay_seconds,
        policy=policy,
        replay=result,
        first_day=first_day,
        usd_per_worker_hour=profile.prices.instances_per_hour[first.instance_type],
    )


def _model_plan(
    profile: Profile, manifest: Manifest | None, load: ModelLoad, service: ServicePlan
) -> ModelPlan:
    path = profile.path
    sync, other = load.sync_share, 1 - load.sync_share
    calls_per_request = 1 + other * path.async_polls
    router_ms = load.latency_ms
    if router_ms is None:
        per_worker = load.peak_rps * (1 + load.shadow_share) / service.needed_at_peak
        forming = min(load.max_wait_ms / 1000, load.messages_per_batch / per_worker)
        router_ms = path.router_overhead_ms + 1000 * (forming + 2 * load.batch_seconds)
    seconds_per_request = (
        sync * router_ms + (other + other * path.async_polls) * path.router_overhead_ms
    ) / 1000
    reserved = max(1, _ceil(load.peak_rps * seconds_per_request * (1 + profile.headroom)))
    # A worker's batch holds what arrived while the last one ran, up to the batch size.
    workers = service.replay.worker_hours / 24 or 1.0
    per_worker = load.mean_rps * (1 + load.shadow_share) / workers
    fill = min(
        float(load.messages_per_batch),
        max(1.0, per_worker * (load.batch_seconds + load.max_wait_ms / 1000)),
    )
    visibility = path.visibility_timeout_seconds
    if manifest is not None and "visibility_timeout_seconds" not in path.model_fields_set:
        visibility = manifest.platform.visibility_timeout_seconds
    return ModelPlan(
        model=load.name,
        service=load.service,
        peak_rps=load.peak_rps,
        mean_rps=load.mean_rps,
        api_peak_rps=load.peak_rps * calls_per_request,
        router_ms=router_ms,
        reserved_concurrency=reserved,
        messages_per_batch=load.messages_per_batch,
        batch_fill=fill,
        batch_seconds=load.batch_seconds,
        backlog_per_task=service.policy.backlog_per_task,
        backlog_seconds=service.policy.backlog_per_task / service.worker_rps,
        in_flight_at_max=service.max_workers * load.messages_per_batch * 2,
        visibility_timeout_seconds=visibility,
    )


def _monthly_counts(
    profile: Profile,
    loads: Sequence[ModelLoad],
    models: Sequence[ModelPlan],
    services: dict[str, ServicePlan],
) -> dict[str, float]:
    """What a month of the mean traffic counts, by what it is billed on."""
    path = profile.path
    gb_per_invocation_second = path.router_memory_mb / 1024
    out = dict.fromkeys(
        (
            "requests",
            "api_calls",
            "lambda_invocations",
            "lambda_gb_seconds",
            "sqs_requests",
            "dynamodb_wru",
            "dynamodb_rru",
            "firehose_records",
            "firehose_gb",
            "worker_hours",
            "idle_worker_hours",
        ),
        0.0,
    )
    for load, model in zip(loads, models, strict=True):
        requests = load.mean_rps * SECONDS_PER_MONTH
        messages = requests * (1 + load.shadow_share)
        sync, other = load.sync_share, 1 - load.sync_share
        calls = requests * (1 + other * path.async_polls)
        wait = services[load.service].replay.waits.mean()
        seconds = requests * (
            sync * (model.router_ms / 1000 + wait)
            + other * (1 + path.async_polls) * path.router_overhead_ms / 1000
        )
        item = load.payload_out_bytes + path.result_item_overhead_bytes
        batches = messages / model.batch_fill
        out["requests"] += requests
        out["api_calls"] += calls
        out["lambda_invocations"] += calls
        out["lambda_gb_seconds"] += seconds * gb_per_invocation_second
        out["sqs_requests"] += messages * max(1, math.ceil(load.payload_in_bytes / SQS_CHUNK_BYTES))
        out["sqs_requests"] += 2 * batches * math.ceil(model.batch_fill / SQS_BATCH)
        out["dynamodb_wru"] += messages * load.result_writes * math.ceil(item / 1024)
        out["dynamodb_wru"] += requests * other  # the router's queued record
        out["dynamodb_wru"] += admission_writes(requests, sync, batches)
        out["dynamodb_rru"] += (
            requests
            * (sync * load.result_reads + other * path.async_polls)
            * math.ceil(item / 4096)
            + batches * path.status_reads_per_batch
        )
        # A batch's prediction-log lines go in one record (up to 500 lines).
        out["firehose_records"] += batches * math.ceil(model.batch_fill / LOG_LINES_PER_RECORD)
        billed = log_billed_bytes(model.batch_fill, path.log_record_bytes)
        out["firehose_gb"] += batches * billed / GIB
    for service in services.values():
        out["worker_hours"] += service.replay.worker_hours * HOURS_PER_MONTH / 24
        out["idle_worker_hours"] += service.replay.idle_hours * HOURS_PER_MONTH / 24
    out["sqs_requests"] += out["idle_worker_hours"] * path.idle_worker_sqs_per_hour
    return out


def _monthly_usd(
    profile: Profile, monthly: dict[str, float], services: Sequence[ServicePlan]
) -> dict[str, float]:
    p = profile.prices
    usd = {
        "API Gateway": cost(monthly["api_calls"] / 1e6, p.apigateway_rest_per_million),
        "Lambda": cost(monthly["lambda_invocations"] / 1e6, p.lambda_per_million_requests)
        + cost(monthly["lambda_gb_seconds"], p.lambda_per_gb_second),
        "SQS": cost(monthly["sqs_requests"] / 1e6, p.sqs_per_million_requests),
        "DynamoDB": cost(monthly["dynamodb_wru"] / 1e6, p.dynamodb_per_million_wru)
        + cost(monthly["dynamodb_rru"] / 1e6, p.dynamodb_per_million_rru),
        "Firehose": cost(monthly["firehose_gb"], p.firehose_per_gb),
    }
    for service in services:
        key = f"EC2 {service.instance_type}"
        usd[key] = usd.get(key, 0.0) + service.usd_per_month
    return usd


def _quotas(
    profile: Profile,
    manifest: Manifest | None,
    loads: Sequence[ModelLoad],
    models: Sequence[ModelPlan],
    services: Sequence[ServicePlan],
) -> list[Quota]:
    """The account quotas the plan needs at the peak with headroom, against what the
    account has (a new account's, unless the profile's ``[account]`` says)."""
    account, path = profile.account, profile.path
    grow = 1 + profile.headroom
    routers = sum(m.reserved_concurrency for m in models)
    fixed = 0
    fixed_why = ""
    if manifest is not None:
        budget = manifest.stages[profile.stage].concurrency
        fixed = budget.authorizer + budget.openai + budget.jobs + budget.splitter
        fixed_why = (
            f", the stage's other functions {fixed} (authorizer, OpenAI API, jobs, splitter)"
        )
    api = sum(m.api_peak_rps for m in models) * grow
    messages = [m.peak_rps * (1 + m.shadow_share) * grow for m in loads]
    fills = [m.batch_fill for m in models]
    wru = sum(
        n
        * m.result_writes
        * math.ceil((m.payload_out_bytes + path.result_item_overhead_bytes) / 1024)
        + m.peak_rps * (1 - m.sync_share) * grow
        + admission_writes(m.peak_rps * grow, m.sync_share, n / fill)
        for n, m, fill in zip(messages, loads, fills, strict=True)
    )
    rru = sum(
        m.peak_rps
        * grow
        * (m.sync_share * m.result_reads + (1 - m.sync_share) * path.async_polls)
        * math.ceil((m.payload_out_bytes + path.result_item_overhead_bytes) / 4096)
        + n / fill * path.status_reads_per_batch
        for n, m, fill in zip(messages, loads, fills, strict=True)
    )
    lines = sum(messages)
    log_requests = sum(
        n / model.messages_per_batch for n, model in zip(messages, models, strict=True)
    )
    quotas = [
        Quota(
            "Lambda concurrent executions",
            "L-B99A9384",
            routers + fixed + UNRESERVED_CONCURRENCY_MINIMUM,
            account.lambda_concurrency,
            f"the routers {routers:,} (rate × time in the router, at the peak with headroom)"
            f"{fixed_why}, and Lambda's unreserved {UNRESERVED_CONCURRENCY_MINIMUM}",
        ),
        Quota(
            "API Gateway throttle rate per account and region (requests/s)",
            "L-8A5B8E43",
            _ceil(api),
            account.api_gateway_rate,
            "every model's calls at its peak with headroom, async polls included",
        ),
    ]
    hosts: dict[tuple[str, str], tuple[int, list[str]]] = {}
    for service in services:
        key = host_quota([service.instance_type])
        vcpus, seen = hosts.get(key, (0, []))
        hosts[key] = (
            vcpus + service.max_workers * service.vcpus_per_worker,
            [*seen, service.instance_type],
        )
    for (name, code), (vcpus, types) in hosts.items():
        have = account.gpu_vcpus if code == "L-DB2E81BA" else account.standard_vcpus
        quotas.append(
            Quota(
                name,
                code,
                vcpus,
                have,
                f"every service at its maximum ({', '.join(dict.fromkeys(types))}, "
                "one worker a host)",
            )
        )
    quotas += [
        Quota(
            "DynamoDB on-demand write units per second, results table",
            None,
            _ceil(wru),
            account.dynamodb_table_units,
            "a result written per message (1 KB units), a queued record per async request",
        ),
        Quota(
            "DynamoDB on-demand read units per second, results table",
            None,
            _ceil(rru),
            account.dynamodb_table_units,
            "the routers' looks for results (4 KB units), the workers' status reads",
        ),
        Quota(
            "SQS messages in flight per standard queue",
            None,
            max(m.in_flight_at_max for m in models),
            account.sqs_in_flight,
            "the busiest queue: two batches held by each worker at the maximum",
        ),
        Quota(
            "Firehose Direct PUT records per second, prediction-log stream",
            None,
            _ceil(log_requests),
            account.firehose_records_per_second,
            "one record per full batch, a line per prediction in it",
        ),
        Quota(
            "Firehose Direct PUT requests per second, prediction-log stream",
            None,
            _ceil(log_requests),
            account.firehose_requests_per_second,
            "one PutRecordBatch per full batch",
        ),
        Quota(
            "Firehose Direct PUT MiB per second, prediction-log stream",
            None,
            _ceil(lines * path.log_record_bytes / 2**20),
            account.firehose_mib_per_second,
            f"lines of {path.log_record_bytes} bytes",
        ),
    ]
    return quotas


def _notes(plan: Plan, manifest: Manifest | None, loads: Sequence[ModelLoad]) -> list[str]:
    """What a reader of the plan should act on, in words."""
    notes: list[str] = []
    bound = max_tasks_bound()
    too_big = [s for s in plan.services if s.max_workers > bound]
    if too_big:
        names = ", ".join(f"{s.service} ({s.max_workers})" for s in too_big[:5])
        more = f" and {len(too_big) - 5} more" if len(too_big) > 5 else ""
        notes.append(
            f"{len(too_big)} service(s) need more than the {bound} workers a service may have "
            f"in the cloud (max_tasks): {names}{more}. Split their traffic or raise the bound."
        )
    under = [
        s
        for s in plan.services
        if s.manifest_max_tasks is not None and s.manifest_max_tasks < s.max_workers
    ]
    if under:
        names = ", ".join(f"{s.service} {s.manifest_max_tasks} < {s.max_workers}" for s in under)
        notes.append(
            f"The manifest's max_tasks in {plan.stage} is under the plan's maximum for: {names}."
        )
    kept = [
        s
        for s in plan.services
        if s.replay.scale_ins == 0
        and s.replay.worker_hours > 0
        and s.replay.idle_hours > 0.3 * s.replay.worker_hours
    ]
    if kept:
        idle = sum(s.idle_usd_per_month for s in kept)
        notes.append(
            f"{len(kept)} service(s) never scaled in and idled over 30 % of their worker-hours "
            f"(${idle:,.0f} a month): the rule scales in only after idle_seconds with no work "
            "at all, so a model whose traffic never stops keeps its busiest hour's workers "
            "all day."
        )
    behind = [s for s in plan.services if s.replay.unserved >= 1]
    if behind:
        notes.append(
            "Still queued at the end of the day: "
            + ", ".join(f"{s.service} {s.replay.unserved:,.0f}" for s in behind)
            + " (too few workers for the load)."
        )
    for model in plan.models:
        if model.batch_seconds * 2 > model.visibility_timeout_seconds:
            notes.append(
                f"{model.model}: a batch takes {model.batch_seconds:.1f} s, near the queues' "
                f"visibility timeout of {model.visibility_timeout_seconds} s."
            )
    if manifest is not None and any(load.in_manifest for load in loads):
        absent = [m for m in manifest.models if m not in {load.name for load in loads}]
        if absent:
            notes.append(
                f"Manifest models without traffic in the profile, left out: {', '.join(absent)}."
            )
    return notes
