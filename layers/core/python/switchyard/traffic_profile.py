"""A traffic profile: what ``switchyard plan`` sizes the platform for.

A TOML file, checked as strictly as the manifest: an unknown key or a bad value
is refused, named by its path (``models.minilm-embed.peak_rps``). Per model, its
traffic (a peak and mean rate with a daily shape, or a trace of the day), its
payloads, and what one worker of it takes (requests a second, or the batch's
compute time it follows from); a fleet stands for many models whose traffic splits
by a Zipf law. What a profile leaves out of a model comes from the manifest's entry
for it (compute, instance type, batch size, pool, scaling), then from the
profile's ``[defaults]``. :func:`resolve` turns a profile into one
:class:`ModelLoad` per model, every figure decided.
"""

from __future__ import annotations

import csv
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from switchyard.costs import ROUTER_MEMORY_MB
from switchyard.fields import field_path
from switchyard.manifest import Manifest, ScalingSettings, Stage
from switchyard.prices import PriceTable
from switchyard.quotas import (
    API_GATEWAY_BURST_DEFAULT,
    API_GATEWAY_RATE_DEFAULT,
    DYNAMODB_TABLE_UNITS_DEFAULT,
    FIREHOSE_MIB_PER_SECOND_DEFAULT,
    FIREHOSE_RECORDS_PER_SECOND_DEFAULT,
    FIREHOSE_REQUESTS_PER_SECOND_DEFAULT,
    LAMBDA_CONCURRENCY_DEFAULT,
    SQS_IN_FLIGHT_DEFAULT,
)
from switchyard.scaling_replay import DAY_SECONDS, Arrivals

Compute = Literal["cpu", "gpu"]
T = TypeVar("T")
# Hourly multipliers of a day (00:00 to 23:00), mapped onto a model's mean and peak.
SHAPES: dict[str, tuple[float, ...]] = {
    "flat": (1.0,) * 24,
    # a consumer-facing service: quiet before dawn, busy from late morning into the evening
    "diurnal": (
        0.45, 0.35, 0.30, 0.28, 0.30, 0.40, 0.60, 0.85, 1.10, 1.30, 1.40, 1.45,
        1.50, 1.45, 1.45, 1.40, 1.35, 1.30, 1.35, 1.40, 1.30, 1.05, 0.80, 0.60,
    ),
    # office hours: a plateau from 09:00 to 17:00, little at night
    "business": (
        0.10, 0.10, 0.10, 0.10, 0.10, 0.15, 0.30, 0.70, 1.40, 1.90, 2.00, 2.00,
        1.80, 1.95, 2.00, 2.00, 1.90, 1.40, 0.80, 0.50, 0.35, 0.25, 0.15, 0.10,
    ),
}  # fmt: skip
# Where a profile and the manifest say nothing: the time from a decision to start a
# worker until it serves (instance launch, image pull, model load). Not measured in
# the cloud (docs/scaling.md); a GPU host's image is the larger.
START_DELAY_SECONDS: dict[Compute, float] = {"gpu": 180.0, "cpu": 60.0}


class ProfileError(ValueError):
    """A profile that cannot be planned; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelProfile(_Strict):
    """One model's traffic and what its workers do. Any field left out comes from the
    manifest's entry for the model, then from the profile's ``[defaults]``."""

    peak_rps: float | None = Field(
        default=None, gt=0, description="Requests a second at the day's busiest moment"
    )
    mean_rps: float | None = Field(
        default=None,
        gt=0,
        description="Requests a second over the day (default: what the shape gives the peak)",
    )
    shape: Literal["flat", "diurnal", "business"] | list[float] | None = Field(
        default=None,
        description="The day's shape: a named one or 24 hourly multipliers from 00:00, mapped "
        "onto the mean and the peak (default: diurnal)",
    )
    trace: str | None = Field(
        default=None,
        description="A CSV file of `seconds,rps` over one day (relative to the profile), in "
        "place of a shape; `peak_rps` rescales it",
    )
    pool: str | None = Field(default=None, description="The manifest's pool that serves it")
    compute: Compute | None = Field(default=None, description="cpu or gpu workers")
    instance_type: str | None = Field(default=None, description="Its workers' EC2 type")
    batch_size: int | None = Field(default=None, ge=1, le=1024, description="Inputs a batch")
    max_wait_ms: int | None = Field(
        default=None, ge=0, description="How long a forming batch waits for more"
    )
    inputs_per_request: int | None = Field(default=None, ge=1, description="Inputs a request")
    worker_rps: float | None = Field(
        default=None,
        gt=0,
        description="Requests one worker answers a second at full batches (a measured "
        "figure); or give `batch_ms`, or `per_input_ms`",
    )
    batch_ms: float | None = Field(default=None, gt=0, description="One full batch's time")
    per_input_ms: float | None = Field(
        default=None, gt=0, description="Compute time per input (with `batch_overhead_ms`)"
    )
    batch_overhead_ms: float | None = Field(
        default=None, ge=0, description="Time a batch costs whatever its size"
    )
    payload_in_bytes: int | None = Field(default=None, ge=0, description="A request's body")
    payload_out_bytes: int | None = Field(default=None, ge=0, description="A request's answer")
    sync_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of requests whose caller waits (the rest async)",
    )
    shadow_share: float | None = Field(
        default=None, ge=0, le=1, description="Share of requests copied to a shadow version"
    )
    result_writes: float | None = Field(
        default=None,
        ge=0,
        description="Result items written per request (default 1; a streamed generation "
        "also writes its chunks)",
    )
    result_reads: float | None = Field(
        default=None,
        ge=0,
        description="Reads of the results table per sync request (default: the path's "
        "`result_looks`)",
    )
    latency_ms: float | None = Field(
        default=None,
        gt=0,
        description="A sync request's time in its router (default: the path's overhead, the "
        "batch forming, the batch in progress and its own)",
    )
    start_delay_seconds: float | None = Field(
        default=None, ge=0, description="From a decision to start a worker until it serves"
    )
    scaling: ScalingSettings = Field(
        default=ScalingSettings(),
        description="Overrides of the manifest's scaling for the plan's stage",
    )

    @model_validator(mode="after")
    def _one_day(self) -> ModelProfile:
        if isinstance(self.shape, list) and len(self.shape) != 24:
            raise ValueError(f"shape: 24 hourly multipliers, not {len(self.shape)}")
        if isinstance(self.shape, list) and (min(self.shape) < 0 or max(self.shape) <= 0):
            raise ValueError("shape: multipliers are >= 0 and one is > 0")
        if self.trace is not None and self.shape is not None:
            raise ValueError("trace: a model has a trace or a shape, not both")
        if self.trace is not None and self.mean_rps is not None:
            raise ValueError("mean_rps: a trace gives its own mean")
        if self.peak_rps and self.mean_rps and self.mean_rps > self.peak_rps:
            raise ValueError(f"mean_rps: {self.mean_rps} is over peak_rps {self.peak_rps}")
        return self


class FleetProfile(ModelProfile):
    """Many models alike (``<name>-01`` ...): ``peak_rps`` and ``mean_rps`` are the
    fleet's, split among its models by a Zipf law (model i gets 1/i^zipf of it)."""

    models: int = Field(ge=1, le=500, description="How many models")
    zipf: float = Field(default=1.0, ge=0, le=4, description="0: an even split")

    @model_validator(mode="after")
    def _split_traffic(self) -> FleetProfile:
        if self.peak_rps is None:
            raise ValueError("peak_rps: a fleet gives its peak")
        if self.trace is not None or self.pool is not None:
            raise ValueError("trace: a fleet takes no trace, and no pool")
        return self


class PoolProfile(_Strict):
    """A manifest pool's settings in the plan."""

    start_delay_seconds: float | None = Field(default=None, ge=0)
    scaling: ScalingSettings = Field(default=ScalingSettings())


class RequestPath(_Strict):
    """What each request costs on the platform's path, beyond the model: the
    defaults are the bench's counts (docs/benchmarks.md, "AWS calls and cost per
    inference", 16 callers at once) and the deployed settings."""

    router_overhead_ms: float = Field(
        default=30.0,
        gt=0,
        description="A router's time on a request besides waiting for the batch: admission, "
        "enqueue, the looks for the result",
    )
    router_memory_mb: int = Field(
        default=ROUTER_MEMORY_MB, ge=128, description="The routers' memory (the deployed one's)"
    )
    result_looks: float = Field(
        default=1.9, ge=0, description="Reads of the results table a sync request makes"
    )
    result_item_overhead_bytes: int = Field(
        default=300, ge=0, description="A result item's keys, status and timings"
    )
    log_record_bytes: int = Field(
        default=550,
        gt=0,
        description="A prediction's redacted log line with its cost (a batch's lines are one "
        "Firehose record, billed rounded up to 5 KB)",
    )
    status_reads_per_batch: float = Field(
        default=1.0, ge=0, description="Reads a worker makes per batch (the requests' status)"
    )
    async_polls: float = Field(
        default=1.0, ge=0, description="GETs of /v1/requests/{id} per async request"
    )
    idle_worker_sqs_per_hour: float = Field(
        default=7_200.0, ge=0, description="Empty receives of a worker with nothing to do"
    )
    visibility_timeout_seconds: int = Field(
        default=60, ge=1, description="The work queues' (the manifest's, when one is read)"
    )


class SimulationSettings(_Strict):
    """How the day is replayed through the scaling rule (``switchyard.scaling_replay``)."""

    tick_seconds: float = Field(default=10.0, gt=0, le=60)
    decide_every_seconds: float = Field(
        default=60.0, gt=0, le=600, description="The cloud's alarms read one-minute periods"
    )
    warmup_hours: float = Field(default=24.0, ge=0, le=48)
    arrivals: Arrivals = "poisson"
    seed: int = 1


class AccountQuotas(_Strict):
    """What the account has now; the defaults are a new account's
    (``switchyard.quotas``)."""

    lambda_concurrency: int = LAMBDA_CONCURRENCY_DEFAULT
    api_gateway_rate: int = API_GATEWAY_RATE_DEFAULT
    api_gateway_burst: int = API_GATEWAY_BURST_DEFAULT
    gpu_vcpus: int | None = Field(default=None, description="G and VT instances' vCPUs")
    standard_vcpus: int | None = Field(default=None, description="Standard instances' vCPUs")
    dynamodb_table_units: int = DYNAMODB_TABLE_UNITS_DEFAULT
    sqs_in_flight: int = SQS_IN_FLIGHT_DEFAULT
    firehose_records_per_second: int = FIREHOSE_RECORDS_PER_SECOND_DEFAULT
    firehose_requests_per_second: int = FIREHOSE_REQUESTS_PER_SECOND_DEFAULT
    firehose_mib_per_second: int = FIREHOSE_MIB_PER_SECOND_DEFAULT


class Profile(_Strict):
    """A whole traffic profile (``docs/profiles/*.toml``)."""

    description: str = ""
    stage: Stage = Field(default="prod", description="The manifest stage whose scaling it plans")
    headroom: float = Field(
        default=0.3, ge=0, le=5, description="Capacity over the peak, for skew, failures, bursts"
    )
    defaults: ModelProfile = Field(default=ModelProfile(), description="For every model")
    models: dict[str, ModelProfile] = Field(default_factory=dict)
    fleets: dict[str, FleetProfile] = Field(default_factory=dict)
    pools: dict[str, PoolProfile] = Field(default_factory=dict)
    path: RequestPath = Field(default=RequestPath())
    simulation: SimulationSettings = Field(default=SimulationSettings())
    account: AccountQuotas = Field(default=AccountQuotas())
    prices: PriceTable = Field(default=PriceTable())

    @model_validator(mode="after")
    def _something_to_plan(self) -> Profile:
        if not self.models and not self.fleets:
            raise ValueError("models: a profile plans at least one model or fleet")
        for name in ("peak_rps", "mean_rps", "trace", "pool"):
            if getattr(self.defaults, name) is not None:
                raise ValueError(f"defaults.{name}: given per model, not for every model")
        for name, model in self.models.items():
            if model.peak_rps is None and model.trace is None:
                raise ValueError(f"models.{name}.peak_rps: a model gives its peak or a trace")
        sim = self.simulation
        if DAY_SECONDS % sim.tick_seconds or sim.decide_every_seconds % sim.tick_seconds:
            raise ValueError(
                "simulation.tick_seconds: divides a day and simulation.decide_every_seconds"
            )
        return self


def load_profile(path: Path | str) -> Profile:
    """Read and check a profile; a mistake raises :class:`ProfileError` naming the
    field (``models.minilm-embed.peak_rps: ...``)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ProfileError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not TOML: {exc}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{path}: {_first_problem(exc)}") from None


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    # A union's member types are part of pydantic's location; a reader wrote none.
    loc = [part for part in error["loc"] if not _TYPE_TAG.search(str(part))]
    where = field_path(loc)
    message = error["msg"].removeprefix("Value error, ")
    if where and _NAMES_A_FIELD.match(message):
        return f"{where}.{message}"  # a check of a table, naming the field in it
    return f"{where}: {message}" if where else message


_TYPE_TAG = re.compile(r"[\[\]']|^(float|int|str|bool|list|dict)$")
_NAMES_A_FIELD = re.compile(r"^[a-z_]+(\.[\w-]+)*: ")


@dataclass(frozen=True)
class ModelLoad:
    """One model, every figure decided: its traffic, its workers, its path."""

    name: str
    service: str  # the worker service that serves it: its own name, or its pool's
    compute: Compute
    instance_type: str
    batch_size: int  # inputs
    inputs_per_request: int
    max_wait_ms: float
    worker_rps: float  # requests one worker answers a second, at full batches
    peak_rps: float
    mean_rps: float
    day: tuple[float, ...]  # requests/s at each tick of the day
    payload_in_bytes: int
    payload_out_bytes: int
    sync_share: float
    shadow_share: float
    result_writes: float
    result_reads: float  # per sync request
    latency_ms: float | None  # the profile's; None: the plan works it out
    start_delay_seconds: float
    scaling: dict[str, int]  # the policy's values but max_tasks (and that, where set)
    manifest_max_tasks: int | None  # what the manifest sets now, to compare with
    in_manifest: bool

    @property
    def messages_per_batch(self) -> int:
        return max(1, self.batch_size // self.inputs_per_request)

    @property
    def batch_seconds(self) -> float:
        return self.messages_per_batch / self.worker_rps


def resolve(profile: Profile, manifest: Manifest | None, where: Path) -> list[ModelLoad]:
    """Every model of ``profile`` with its figures decided (model entry, then the
    manifest's entry, then the profile's defaults, then the built-in defaults).
    ``where`` is the profile's folder, for traces."""
    entries: dict[str, tuple[str, ModelProfile, float]] = {}
    for name, model in profile.models.items():
        entries[name] = (f"models.{name}", model, 1.0)
    for fleet_name, fleet in profile.fleets.items():
        weights = [1 / (i**fleet.zipf) for i in range(1, fleet.models + 1)]
        total = sum(weights)
        width = len(str(fleet.models))
        for i, weight in enumerate(weights, start=1):
            name = f"{fleet_name}-{i:0{max(2, width)}d}"
            if name in entries:
                raise ProfileError(f"fleets.{fleet_name}: its model {name} is also in models")
            entries[name] = (f"fleets.{fleet_name}", fleet, weight / total)
    return [
        _resolve_one(profile, manifest, where, name, at, entry, share)
        for name, (at, entry, share) in entries.items()
    ]


def _resolve_one(
    profile: Profile,
    manifest: Manifest | None,
    where: Path,
    name: str,
    at: str,
    entry: ModelProfile,
    share: float,
) -> ModelLoad:
    defaults = profile.defaults
    spec = manifest.models.get(name) if manifest else None
    pool = _first(entry.pool, spec.pool if spec else None)
    if pool is not None and (manifest is None or pool not in manifest.pools):
        raise ProfileError(f"{at}.pool: {pool!r} is no pool of the manifest")
    pool_spec = manifest.pools[pool] if manifest and pool else None
    if pool is not None and entry.scaling != ScalingSettings():
        raise ProfileError(f"{at}.scaling: a model of pool {pool!r} scales with it (pools.{pool})")

    # The entry, then the manifest (the pool's hosts for a pooled model), then [defaults].
    hosts = pool_spec or spec
    compute = _first(entry.compute, hosts.compute if hosts else None, defaults.compute)
    instance = _first(
        entry.instance_type,
        hosts.instance_types[0] if hosts and hosts.instance_types else None,
        defaults.instance_type,
    )
    batch_size = _first(
        entry.batch_size, spec.max_batch_size if spec else None, defaults.batch_size
    )
    if compute is None:
        raise ProfileError(f"{at}.compute: not given, and the manifest has no {name}")
    if instance is None:
        raise ProfileError(f"{at}.instance_type: not given, and the manifest has no {name}")
    if batch_size is None:
        raise ProfileError(f"{at}.batch_size: not given, and the manifest has no {name}")
    inputs = _first(entry.inputs_per_request, defaults.inputs_per_request) or 1
    max_wait = _first(entry.max_wait_ms, spec.max_wait_ms if spec else None, defaults.max_wait_ms)
    worker_rps = _worker_rps(entry, defaults, batch_size, inputs, at)

    day, peak, mean = _traffic(entry, defaults, share, where, at, profile.simulation.tick_seconds)
    latency = _first(entry.latency_ms, defaults.latency_ms)
    pool_delay = profile.pools[pool].start_delay_seconds if pool in profile.pools else None
    start_delay = _first(pool_delay, entry.start_delay_seconds, defaults.start_delay_seconds)
    scaling, manifest_max = _scaling(profile, manifest, name, pool, entry, at)
    return ModelLoad(
        name=name,
        service=pool or name,
        compute=compute,
        instance_type=instance,
        batch_size=batch_size,
        inputs_per_request=inputs,
        max_wait_ms=float(10 if max_wait is None else max_wait),
        worker_rps=worker_rps,
        peak_rps=peak,
        mean_rps=mean,
        day=day,
        payload_in_bytes=_first(entry.payload_in_bytes, defaults.payload_in_bytes) or 0,
        payload_out_bytes=_first(entry.payload_out_bytes, defaults.payload_out_bytes) or 0,
        sync_share=_first(entry.sync_share, defaults.sync_share, 1.0) or 0.0,
        shadow_share=_first(entry.shadow_share, defaults.shadow_share) or 0.0,
        result_writes=_first(entry.result_writes, defaults.result_writes, 1.0) or 0.0,
        result_reads=_first(entry.result_reads, defaults.result_reads, profile.path.result_looks)
        or 0.0,
        latency_ms=latency,
        start_delay_seconds=_first(start_delay, START_DELAY_SECONDS[compute]) or 0.0,
        scaling=scaling,
        manifest_max_tasks=manifest_max,
        in_manifest=spec is not None,
    )


def _first(*values: T | None) -> T | None:
    """The first value given (not None)."""
    return next((value for value in values if value is not None), None)


def _worker_rps(
    entry: ModelProfile, defaults: ModelProfile, batch: int, inputs: int, at: str
) -> float:
    """Requests a worker answers a second: the entry's figure of throughput if it
    gives one (``worker_rps``, ``batch_ms`` or ``per_input_ms``), else the defaults'."""
    for source in (entry, defaults):
        if source.worker_rps is not None:
            return source.worker_rps
        if source.batch_ms is not None:
            return batch / (source.batch_ms / 1000) / inputs
        if source.per_input_ms is not None:
            overhead = source.batch_overhead_ms or 0.0
            return batch / ((overhead + batch * source.per_input_ms) / 1000) / inputs
    raise ProfileError(
        f"{at}.worker_rps: what one worker takes is not given (worker_rps, batch_ms or "
        "per_input_ms, here or in [defaults])"
    )


def _traffic(
    entry: ModelProfile,
    defaults: ModelProfile,
    share: float,
    where: Path,
    at: str,
    tick: float,
) -> tuple[tuple[float, ...], float, float]:
    """The day's rate at each tick, its peak and its mean."""
    points: list[tuple[float, float]]  # (seconds into the day, rps)
    if entry.trace is not None:
        points = _read_trace(where / entry.trace, f"{at}.trace")
        top = max(rps for _, rps in points)
        if top <= 0:
            raise ProfileError(f"{at}.trace: no traffic in it")
        scale = (entry.peak_rps * share / top) if entry.peak_rps else share
        points = [(s, rps * scale) for s, rps in points]
    else:
        shape = entry.shape or defaults.shape or "diurnal"
        hours = SHAPES[shape] if isinstance(shape, str) else tuple(shape)
        given_peak = entry.peak_rps or 0.0  # given where there is no trace (checked)
        peak = given_peak * share
        average, top = sum(hours) / 24, max(hours)
        if entry.mean_rps is None or top - average < 1e-12:
            if entry.mean_rps is not None and abs(entry.mean_rps - given_peak) > 1e-9:
                raise ProfileError(f"{at}.mean_rps: a flat shape has its mean at its peak")
            rates = [peak * h / top for h in hours]
        else:
            mean = entry.mean_rps * share
            slope = (peak - mean) / (top - average)
            rates = [mean + (h - average) * slope for h in hours]
            if min(rates) < -1e-9:
                hour = rates.index(min(rates))
                raise ProfileError(
                    f"{at}.mean_rps: with this shape, a mean of {entry.mean_rps:g} under the "
                    f"peak of {given_peak:g} leaves hour {hour:02d} below zero"
                )
        points = [(h * 3600.0, max(0.0, r)) for h, r in enumerate(rates)]
    day = _sampled(points, tick)
    peak = max(rps for _, rps in points)
    return day, peak, sum(day) / len(day)


def _sampled(points: list[tuple[float, float]], tick: float) -> tuple[float, ...]:
    """The rate at the middle of each tick of the day, on the straight lines between
    the points (sorted by time; the day wraps round)."""
    knots = [(points[-1][0] - DAY_SECONDS, points[-1][1]), *points]
    knots.append((points[0][0] + DAY_SECONDS, points[0][1]))
    out, i = [], 0
    for k in range(int(DAY_SECONDS // tick)):
        at = (k + 0.5) * tick
        while knots[i + 1][0] <= at:
            i += 1
        (s0, r0), (s1, r1) = knots[i], knots[i + 1]
        out.append(r0 + (r1 - r0) * (at - s0) / (s1 - s0))
    return tuple(out)


def _read_trace(path: Path, at: str) -> list[tuple[float, float]]:
    try:
        with open(path, newline="") as fh:
            rows = [row for row in csv.reader(fh) if row and not row[0].startswith("#")]
    except OSError as exc:
        raise ProfileError(f"{at}: {path}: {exc.strerror or exc}") from None
    points = []
    for number, row in enumerate(rows, start=1):
        try:
            seconds, rps = float(row[0]), float(row[1])
        except (ValueError, IndexError):
            if number == 1:
                continue  # a header
            raise ProfileError(f"{at}: {path} line {number}: not `seconds,rps`") from None
        if not 0 <= seconds < DAY_SECONDS or rps < 0 or not math.isfinite(rps):
            raise ProfileError(f"{at}: {path} line {number}: seconds in [0, 86400) and rps >= 0")
        points.append((seconds, rps))
    points.sort()
    if not points:
        raise ProfileError(f"{at}: {path}: no `seconds,rps` rows")
    return points


def _scaling(
    profile: Profile,
    manifest: Manifest | None,
    name: str,
    pool: str | None,
    entry: ModelProfile,
    at: str,
) -> tuple[dict[str, int], int | None]:
    """The policy's values for the plan's stage (the manifest's, then the profile's
    defaults, then the model's or pool's own), and the manifest's max_tasks now."""
    stage = profile.stage
    values: dict[str, int] = {}
    manifest_max = None
    if manifest is not None:
        if stage not in manifest.stages:
            raise ProfileError(f"stage: the manifest has no stage {stage!r}")
        values = dict(manifest.stages[stage].scaling.given())
        if pool is not None:
            values.update(manifest.pools[pool].scaling.for_stage(stage))
        elif name in manifest.models:
            values.update(manifest.models[name].scaling.for_stage(stage))
        # The plan sets the maximum; what the manifest sets now is compared with it.
        manifest_max = values.pop("max_tasks", None)
        if pool is None and name not in manifest.models:
            manifest_max = None
    values.update(profile.defaults.scaling.given())
    own = profile.pools.get(pool, PoolProfile()).scaling if pool else entry.scaling
    values.update(own.given())
    missing = [
        field
        for field in ScalingSettings.model_fields
        if field not in values and field not in ("max_tasks", "min_tasks")
    ]
    if missing:
        raise ProfileError(
            f"{at}.scaling: no {', '.join(missing)} (give them under [defaults.scaling], or "
            "read a manifest)"
        )
    values.setdefault("min_tasks", 0)
    return values, manifest_max
