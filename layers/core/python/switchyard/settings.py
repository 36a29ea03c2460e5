"""Runtime settings: the ``SWITCHYARD_*`` environment contract, defined once.

Each deployable reads its own settings class at cold start (Lambda init, worker
start): :class:`RouterSettings`, :class:`SplitterSettings`, :class:`WorkerSettings`,
all built on the common :class:`Settings`, from the ``SWITCHYARD_<NAME>`` variables
(:func:`from_environment`: a mapping or a list as JSON, anything else as text for
the field's type to parse). In the cloud the CDK app writes the
variables, locally the supervisor does; both render them with
:func:`to_environment` from the same classes, so the two cannot drift apart. A
missing or malformed variable fails the start with a message naming it
(:func:`get_settings`), never a 500 on a request.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from switchyard.budgets import TenantBudget
from switchyard.costs import CostRates
from switchyard.overflow import OverflowSource
from switchyard.schemas import Lane

ENV_PREFIX = "SWITCHYARD_"


class QueuePair(BaseModel):
    """A model's two work queues (URLs)."""

    realtime: str
    batch: str


class Settings(BaseModel):
    """What every process of the platform needs to find its resources."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    stage: str = Field(default="dev", description="The stage (`dev`, `prod`)")
    region: str = Field(default="us-east-1", description="The AWS region of its resources")
    aws_endpoint_url: str | None = Field(
        default=None,
        description="Set only on the local platform: the emulator's address. Unset in the cloud",
    )

    registry_table: str = Field(description="The registry's DynamoDB table")
    results_table: str = Field(
        description="The DynamoDB table of results, async status and streamed chunks"
    )
    payloads_bucket: str = Field(
        description="The S3 bucket of claim-checked inputs and large outputs"
    )
    queues: dict[str, QueuePair] = Field(
        description="Model name -> its queue URLs (`realtime`, `batch`). A router function "
        "in the cloud serves one model; the local router serves every model in the manifest"
    )
    queue_url_prefix: str = Field(
        default="",
        description="Put before each URL of `queues` given without its scheme: a function "
        "that reaches every model's queues carries only what differs (`<model>-realtime`), "
        "so that many models fit in Lambda's 4 KB of environment",
    )

    @model_validator(mode="before")
    @classmethod
    def _whole_queue_urls(cls, data: Any) -> Any:
        prefix = data.get("queue_url_prefix") if isinstance(data, dict) else None
        queues = data.get("queues") if isinstance(data, dict) else None
        if not prefix or not isinstance(queues, dict):
            return data
        whole = {
            model: {
                lane: url if not isinstance(url, str) or "://" in url else prefix + url
                for lane, url in pair.items()
            }
            if isinstance(pair, dict)
            else pair
            for model, pair in queues.items()
        }
        return {**data, "queues": whole}

    result_ttl_seconds: int = Field(
        default=86_400, gt=0, description="How long results and async status are kept"
    )
    claim_check_bytes: int = Field(
        default=200_000,
        gt=0,
        description="Inputs over this travel in S3 and the queue message carries their key "
        "(SQS messages hold 256 KB)",
    )
    result_inline_bytes: int = Field(
        default=8_192,
        gt=0,
        le=350_000,
        description="Outputs over this are stored in S3 and the result item carries their key",
    )
    visibility_timeout_seconds: int = Field(
        default=60,
        ge=10,
        description="The queues' visibility timeout; workers extend held messages before it ends",
    )
    max_receive_count: int = Field(
        default=5,
        ge=1,
        description="Receives before SQS moves a message to its DLQ: a worker writes the "
        "final error of a request on its last one",
    )
    max_age_seconds: dict[Lane, int] = Field(
        default_factory=lambda: {"realtime": 3_600, "batch": 86_400},
        description="How long work may wait to run, per lane (the manifest's `[platform]`)",
    )
    sync_grace_seconds: int = Field(
        default=60,
        ge=0,
        description="How long after its deadline a sync request's work may still run",
    )


class RoutingSettings(Settings):
    """What reads the models' routing documents: the routers, which pick a version
    per request, and whatever records a batch job, which runs on the model's stable
    version."""

    routing_source: Literal["appconfig-extension", "none"] = Field(
        default="none",
        description="Where routing documents come from: the AppConfig extension's HTTP API, "
        "which the Lambda layer serves on localhost:2772 (and the local platform's "
        'stand-in elsewhere); "none" serves each model\'s newest active version',
    )
    appconfig_extension_url: str = Field(
        default="http://localhost:2772", description="The AppConfig extension's HTTP API"
    )
    appconfig_application: str = Field(
        default="", description="The AppConfig application of the routing documents"
    )
    appconfig_environment: str = Field(
        default="",
        description="The AppConfig environment to read; empty: each model's document is in "
        "the environment named after the model",
    )
    routing_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description="How long a routing document read is used before it is read again",
    )
    tenant_budgets: dict[str, TenantBudget] = Field(
        default_factory=dict,
        description="Tenant -> its monthly budget in USD and what its new work (requests, "
        "jobs) does once the month's spend reaches it (`monthly_usd`, `over_budget`: refuse "
        "or batch; switchyard.budgets); a tenant not named here has no budget",
    )


class TenantLimits(BaseModel):
    """What one tenant may hold at once (its tier's, from the manifest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    streams: int = Field(ge=1)
    sync_requests: int = Field(ge=1)
    queued: int | None = Field(default=None, ge=1)  # per model; None: not capped


class RouterSettings(RoutingSettings):
    """The router function (one model in the cloud, every model locally)."""

    tenant_keys: dict[str, str] = Field(
        description="Tenant -> the id of its API key, which API Gateway verifies and names "
        "in each request's context. The router never sees a key's value"
    )
    max_body_bytes: int = Field(
        default=1_048_576, gt=0, description="A request body over this many bytes is refused"
    )
    tenant_limits: dict[str, TenantLimits] = Field(
        default_factory=dict,
        description="Tenant -> its caps on streams and sync requests at once (`streams`, "
        "`sync_requests`) and on its requests queued per model (`queued`), counted across "
        "every router (switchyard.admission); a tenant not named here is not capped",
    )
    busy_retry_after_seconds: int = Field(
        default=5,
        ge=1,
        le=3_600,
        description="The Retry-After of a request refused at its tenant's cap",
    )
    jobs_table: str | None = Field(
        default=None,
        description="Batch jobs (/v1/jobs), on the router that serves them: where jobs are kept",
    )
    batch_drop_bucket: str | None = Field(
        default=None,
        description="Batch jobs: where submitted inputs are written as a file",
    )
    drop_queue_url: str | None = Field(
        default=None,
        description="The batch-drop queue, where a cancelled job's callback is asked for "
        "(switchyard.callbacks)",
    )
    tokenizer_cache: str = Field(
        default="/tmp/switchyard-tokenizers",
        description="Where a generation model's tokenizer (read from the registry's "
        "artifact location, checked against its sha256) is kept once fetched",
    )


class SplitterSettings(RoutingSettings):
    """The batch splitter function."""

    jobs_table: str = Field(description="Where jobs are kept")
    drop_queue_url: str = Field(
        description="Its own trigger queue: where it sends the continuation of a split that "
        "needs more than one invocation"
    )
    split_slice_bytes: int = Field(
        default=4 << 20,
        ge=1024,
        le=64 << 20,
        description="A dropped file is read in ranges of this many bytes (memory stays "
        "within a few)",
    )
    split_max_slices: int = Field(
        default=0,
        ge=0,
        description="Slices one invocation reads before it continues in the next (0: as "
        "many as Lambda's time allows); for tests and for spreading a large file's split",
    )
    webhook_secret_prefix: str | None = Field(
        default=None,
        description="Where the tenants' webhook secrets are (Secrets Manager: this and the "
        "tenant): this function delivers jobs' callbacks, signed with them",
    )
    callbacks_to_private_addresses: bool = Field(
        default=False,
        description="Whether a callback may reach a loopback, private or link-local "
        "address: off in AWS (the URL is a tenant's; switchyard.callbacks), on for the "
        "local platform, whose receivers are on loopback",
    )


class WorkerSettings(Settings):
    """A worker serves every version of one model (a model's own service) or of each
    model of a pool, loading them on first use within the pool's memory budget."""

    worker_model: str | None = Field(
        default=None,
        description="A model's own service: the model whose versions this worker serves "
        "(set this or `worker_pool`)",
    )
    worker_pool: str | None = Field(
        default=None,
        description="A pool's service: the pool this worker belongs to (set this or "
        "`worker_model`)",
    )
    worker_models: list[str] | None = Field(
        default=None,
        description="A pool's service: the models whose versions its workers serve (JSON list)",
    )
    memory_budget_mib: int | None = Field(
        default=None,
        gt=0,
        description="A pool's service: the host memory (MiB) its loaded versions may hold "
        "together, each measured when it loads; the least recently used is evicted to make "
        "room",
    )
    device_memory_budget_mib: int | None = Field(
        default=None,
        gt=0,
        description="A GPU pool's service: the device memory (MiB) its loaded versions may "
        "hold together",
    )
    overflow: dict[str, OverflowSource] = Field(
        default_factory=dict,
        description="A CPU pool's service: the models of GPU pools it also serves when "
        "their work would otherwise wait (JSON: model -> `{pool, after_ms}`): their GPU "
        "pool has no worker running, or their oldest message is older than `after_ms`",
    )
    pool_heartbeat: bool = Field(
        default=False,
        description="A pool whose models overflow to a CPU pool: each running worker says "
        "so in the results table every few seconds, and the CPU pool reads it",
    )
    overflow_age_read_seconds: float = Field(
        default=30.0,
        gt=0,
        le=300,
        description="How often a CPU pool's worker reads the age of its overflow models' "
        "oldest messages from CloudWatch (each read is one GetMetricData call; in AWS "
        "the metric moves once a minute)",
    )
    tenant_weights: dict[str, int] = Field(
        default_factory=dict,
        description="Tenant -> its tier's weight: a turn of the batcher takes up to this "
        "many of the tenant's messages in hand (a tenant not named here weighs 1)",
    )
    artifacts_bucket: str = Field(description="The S3 bucket of the models' artifacts")
    artifacts_cache: str = Field(
        default="/tmp/switchyard-artifacts",
        description="Where artifacts are kept once fetched and their sha256 checked",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description='Where the models run: "auto" is the GPU where torch sees one (the GPU '
        'image on a GPU host) and the CPU elsewhere; "cuda" fails at load on a host without '
        "one",
    )
    # 1 s costs an idle worker two receives a second (7,200 an hour, under $0.003); a
    # longer poll is cheaper and leaves a dropped file's first chunk waiting.
    poll_wait_seconds: int = Field(
        default=1,
        ge=0,
        le=20,
        description="An idle worker's long poll of the realtime lane, after which it looks "
        "at the batch lane (SQS cannot long-poll two queues at once): batch work waits at "
        "most this long to be noticed by an idle worker, while a realtime arrival wakes the "
        "poll at once. A SIGTERM waits for the poll in progress",
    )
    ready_file: str | None = Field(
        default=None,
        description="Touched once the worker has loaded its versions and polls (the "
        "container's health check in ECS, the supervisor locally)",
    )
    pool_state_file: str | None = Field(
        default=None,
        description="A pool's worker writes its model cache's state here (the versions it "
        "holds with their footprints, its loads and evictions) on each change and every "
        "few seconds: the local platform's status reads it. Unset in the cloud, where the "
        "worker's metrics say the same",
    )
    prediction_log_stream: str | None = Field(
        default=None,
        description="The Firehose stream every prediction is logged to (redacted)",
    )
    cost_rates: CostRates | None = Field(
        default=None,
        description="What each answered request's cost is priced with (JSON: the service's "
        "instance type and its price per hour, and a unit of each AWS request; the "
        "manifest's `[prices]`, switchyard.costs): the worker records each request's cost "
        "and its own running and busy time. Unset: requests are not costed",
    )
    meter_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="How often a worker adds its running and busy seconds to its item of "
        "the results table (switchyard costs reads them; one write each time)",
    )
    jobs_table: str | None = Field(
        default=None,
        description="Batch jobs: each chunk's result is counted on its job here, and the "
        "worker that answers a job's last chunk writes its output beside its file",
    )
    drop_queue_url: str | None = Field(
        default=None,
        description="The batch-drop queue: the worker that ends a job asks there for its "
        "callback (switchyard.callbacks)",
    )
    stream_flush_seconds: float = Field(
        default=0.05,
        ge=0,
        le=5,
        description="Generative models: a streamed request's tokens are written at most "
        "this often after its first (each write is one DynamoDB item). Past 4 streams in a "
        "worker the interval grows in proportion, up to 0.2 s (or this, if longer), and to "
        "at least 4 times the last write's time: a reader sees tokens that much later at "
        "worst",
    )
    generation_visibility_seconds: int = Field(
        default=10,
        ge=3,
        le=300,
        description="Generative models' messages are held with this visibility (extended "
        "while they run), so the requests of a worker that died are taken up again this "
        "soon, not after the queue's visibility timeout",
    )
    held_visibility_seconds: int = Field(
        default=15,
        ge=3,
        le=300,
        description="Every other model's messages are held with this visibility, at most "
        "the queue's own (extended every third of it while they wait or run): the requests "
        "of a worker that died are taken up again this soon, well inside a sync request's "
        "grace (`sync_grace_seconds`)",
    )

    @model_validator(mode="after")
    def _one_service(self) -> WorkerSettings:
        """Exactly one of a model's own service and a pool; a pool with its models
        and its budget."""
        name = ENV_PREFIX + "{}"
        if (self.worker_model is None) == (self.worker_pool is None):
            raise ValueError(
                f"set one of {name.format('WORKER_MODEL')} (a model's own service) "
                f"or {name.format('WORKER_POOL')} (a pool)"
            )
        if self.worker_pool is None:
            return self
        needs = [
            name.format(field.upper())
            for field in ("worker_models", "memory_budget_mib")
            if getattr(self, field) is None
        ]
        if needs:
            raise ValueError(f"a pool ({name.format('WORKER_POOL')}) needs {' and '.join(needs)}")
        models = self.worker_models or []
        if len(set(models)) != len(models) or not (models or self.overflow):
            raise ValueError(
                f"{name.format('WORKER_MODELS')}: the pool's models, each once, at least "
                f"one unless it serves {name.format('OVERFLOW')}"
            )
        both = sorted(set(models) & set(self.overflow))
        if both:
            raise ValueError(f"{name.format('OVERFLOW')}: {both[0]!r} is the pool's own model")
        return self

    @property
    def service(self) -> str:
        """The worker service this worker belongs to: its model's, or its pool's."""
        return self.worker_pool or self.worker_model or ""

    @property
    def served_models(self) -> list[str]:
        """The models whose work this worker takes."""
        if self.worker_pool:
            return [*(self.worker_models or []), *self.overflow]
        return [self.worker_model or ""]


class SettingsError(RuntimeError):
    pass


S = TypeVar("S", bound=Settings)


def to_environment(
    kind: type[Settings],
    values: Mapping[str, Any],
    dumps: Callable[[Any], str] = json.dumps,
) -> dict[str, str]:
    """The environment variables that make ``kind`` read ``values``.

    Values are not validated here (in the cloud they are deploy-time tokens), but
    every name must be a field of ``kind`` and every required field must be given,
    so a forgotten variable fails where the environment is written, not at a cold
    start. ``dumps`` renders mappings (the CDK app passes its token-aware JSON).
    """
    fields = kind.model_fields
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise SettingsError(f"{kind.__name__} has no setting {', '.join(unknown)}")
    missing = sorted(n for n, f in fields.items() if f.is_required() and n not in values)
    if missing:
        raise SettingsError(f"{kind.__name__} needs {', '.join(missing)}")
    env = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, Mapping | list | tuple):
            text = dumps(value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[variable(kind, name)] = text
    return env


def variable(kind: type[Settings], name: str) -> str:
    """The environment variable of ``kind``'s setting ``name``."""
    if name not in kind.model_fields:
        raise SettingsError(f"{kind.__name__} has no setting {name}")
    return ENV_PREFIX + name.upper()


def from_environment(kind: type[Settings], environ: Mapping[str, str]) -> dict[str, Any]:
    """The values of ``kind``'s settings in ``environ`` (:func:`variable` names
    them): a mapping or list decoded from JSON, any other value the variable's text,
    parsed by the field's type when validated."""
    values: dict[str, Any] = {}
    for name, field in kind.model_fields.items():
        text = environ.get(variable(kind, name))
        if text is None:
            continue
        if _is_json(field.annotation):
            try:
                values[name] = json.loads(text)
            except ValueError:
                raise SettingsError(
                    f"invalid platform settings: {variable(kind, name)}: not valid JSON"
                ) from None
        else:
            values[name] = text
    return values


def _is_json(annotation: Any) -> bool:
    """Whether a field of this type is written as JSON: a mapping, a list or a model
    (alone or in a union, as ``X | None``)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_is_json(a) for a in get_args(annotation) if a is not type(None))
    if origin in (dict, list, tuple, set):
        return True
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@lru_cache(maxsize=4)
def get_settings(kind: type[S]) -> S:
    """Parse the environment once; a bad variable stops the process with its name."""
    try:
        return kind.model_validate(from_environment(kind, os.environ))
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise SettingsError(f"invalid platform settings: {problems}") from None


def _problem(err: ErrorDetails) -> str:
    """One validation error, named by its variable; a rule across fields (no
    location) names its variables in its own message."""
    loc = err["loc"]
    if not loc:
        return str(err["msg"]).removeprefix("Value error, ")
    where = f" (at {'.'.join(str(p) for p in loc[1:])})" if len(loc) > 1 else ""
    return f"{ENV_PREFIX}{str(loc[0]).upper()}: {err['msg']}{where}"
