"""The platform manifest: models, tenants, tiers and platform settings.

One file (``manifest.toml`` at the repository root) feeds both the CDK app and the
local provisioner, so the two substrates differ in configuration only. Resource
names are derived here, once, so that every part of the platform agrees on them.

Deployed code (the router, the splitter, the workers) never reads the manifest:
the CDK app and the local platform render what it needs into its settings
(``switchyard.settings``). Nothing here looks for a file on import; whoever loads
a manifest names its path.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from switchyard.costs import CostRates
from switchyard.overflow import OverflowSource
from switchyard.prices import PriceTable
from switchyard.registry import ModelVersion
from switchyard.scaling import ScalingPolicy
from switchyard.schemas import LANES, Lane, Signature

Stage = Literal["dev", "prod"]
# A drop is ``<tenant>/<model>/<name>.jsonl`` in the drop bucket; each notification
# of one is a message of the batch-drop queue, and the splitter takes them ten at a
# time (the same in the cloud's event source mapping and on the local platform).
DROP_SUFFIX = ".jsonl"
# The tag on each model's worker service (ECS names services itself): how an
# operator's tools find a model's service in a deployed stack.
MODEL_TAG = "switchyard:model"
# And on each pool's: how its service is found.
POOL_TAG = "switchyard:pool"
DROP_BATCH_SIZE = 10
_MODEL_NAME = re.compile(r"[a-z][a-z0-9-]{1,39}")
# The cloud renders one step adjustment per task count: this bound keeps each step
# policy short.
_MAX_TASKS = 20
# Lambda keeps this much of the account's concurrency unreserved, whatever the
# functions reserve (a PutFunctionConcurrency that would leave less is refused).
UNRESERVED_CONCURRENCY_MINIMUM = 100
# API Gateway's account-level throttle per region (a quota): a stage cannot exceed it.
API_ACCOUNT_RATE = 10_000
API_ACCOUNT_BURST = 5_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlatformSettings(_Strict):
    """Settings of the whole platform, the same in every stage."""

    prefix: str = Field(
        pattern=r"^[a-z][a-z0-9-]{1,20}$",
        description="The first part of every resource name (`<prefix>-<stage>-...`)",
    )
    region: str = Field(
        description="The AWS region the CDK app deploys to; the local platform's emulator "
        "answers as this region"
    )
    result_ttl_seconds: int = Field(
        gt=0,
        description="How long results and async status are kept (the results table's TTL); "
        "a finished job's record names its output as long",
    )
    claim_check_bytes: int = Field(
        gt=0,
        le=250_000,
        description="Request inputs over this many bytes travel in S3 and the queue message "
        "carries their key (an SQS message holds 256 KB)",
    )
    result_inline_bytes: int = Field(
        default=8_192,
        gt=0,
        le=350_000,
        description="Outputs over this many bytes are stored in S3 (one object per tenant "
        "per batch) and the result item points at them",
    )
    max_receive_count: int = Field(
        ge=1,
        le=1000,
        description="Receives of a message before SQS moves it to its DLQ; a worker writes "
        "the request's final error (`retries_exhausted`) on the last one",
    )
    visibility_timeout_seconds: int = Field(
        ge=10,
        le=43_200,
        description="The work queues' visibility timeout: above the longest batch (workers "
        "extend it while they work)",
    )
    max_body_bytes: int = Field(
        gt=0,
        le=6_000_000,
        description="A request body over this many bytes is refused by the router "
        "(400 `body_too_large`)",
    )
    message_retention_seconds: int = Field(
        ge=60, le=1_209_600, description="How long the work queues keep a message"
    )
    dlq_retention_seconds: int = Field(
        ge=60, le=1_209_600, description="How long the dead-letter queues keep a message"
    )
    splitter_timeout_seconds: int = Field(
        default=300,
        ge=10,
        le=900,  # Lambda's limit
        description="The batch splitter's Lambda timeout: an invocation that nears it "
        "records where it is and continues in a new one",
    )
    max_age_seconds: dict[Lane, int] = Field(
        default_factory=lambda: {"realtime": 3_600, "batch": 86_400},
        description="How long work may wait before it runs, per lane, for async and batch "
        "work; a sync request's work expires at its deadline plus `sync_grace_seconds` "
        "(the caller who got 202 at the deadline may still collect it). Work past its "
        'expiry is answered "expired" without running',
    )
    sync_grace_seconds: int = Field(
        default=60,
        ge=0,
        le=3_600,
        description="How long after its deadline a sync request's work may still run",
    )

    @model_validator(mode="after")
    def _ages_fit(self) -> PlatformSettings:
        for lane in LANES:
            age = self.max_age_seconds.get(lane)
            if age is None:
                raise ValueError(f"max_age_seconds.{lane}: missing")
            if not 60 <= age <= self.message_retention_seconds:
                raise ValueError(
                    f"max_age_seconds.{lane}: {age} is not between 60 and "
                    f"message_retention_seconds ({self.message_retention_seconds}): "
                    "SQS would drop the work before it expires"
                )
            if age > self.result_ttl_seconds:
                raise ValueError(
                    f"max_age_seconds.{lane}: {age} is over result_ttl_seconds "
                    f"({self.result_ttl_seconds}): the request's record would be gone first"
                )
        return self

    @property
    def drop_queue_visibility_seconds(self) -> int:
        """Lambda's advice for an event source queue: six times the function's timeout."""
        return 6 * self.splitter_timeout_seconds


class ScalingSettings(_Strict):
    """Scaling numbers, as :class:`switchyard.scaling.ScalingPolicy` takes them.

    Under ``[stages.<stage>.scaling]`` every field is required: the stage's values
    for every model. Under ``[models.<model>.scaling]`` any of them overrides the
    stage's, in every stage or, under ``.dev`` / ``.prod``, in one.
    """

    min_tasks: int | None = Field(
        default=None,
        ge=0,
        description="Never fewer workers: 0 scales to zero, 1 keeps a hot model warm",
    )
    max_tasks: int | None = Field(
        default=None, ge=1, le=_MAX_TASKS, description="Never more workers"
    )
    backlog_per_task: int | None = Field(
        default=None, ge=1, description="Visible messages one worker is expected to hold"
    )
    target_age_seconds: int | None = Field(
        default=None,
        ge=1,
        description="The oldest message older than this, with every worker running that "
        "long: one more worker",
    )
    scale_out_cooldown_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3_600,
        description="Between two scale-outs (waking from zero never waits)",
    )
    scale_in_cooldown_seconds: int | None = Field(
        default=None, ge=0, le=3_600, description="Between two scale-ins"
    )
    # The cloud counts idleness in one-minute periods: whole minutes only.
    idle_seconds: int | None = Field(
        default=None,
        ge=60,
        le=86_400,
        multiple_of=60,
        description="No work for this long: back to `min_tasks` (whole minutes: the cloud "
        "counts idleness in one-minute periods)",
    )

    def given(self) -> dict[str, int]:
        """The fields set here (a model's overrides are partial)."""
        return {
            name: value
            for name in ScalingSettings.model_fields
            if (value := getattr(self, name)) is not None
        }


class ModelScaling(ScalingSettings):
    """A model's overrides of its stages' scaling values: for every stage, and per
    stage (``prod = { min_tasks = 1 }`` keeps a hot model's worker warm in prod)."""

    dev: ScalingSettings = Field(
        default=ScalingSettings(), description="Overrides in the dev stage only"
    )
    prod: ScalingSettings = Field(
        default=ScalingSettings(), description="Overrides in the prod stage only"
    )

    def for_stage(self, stage: Stage) -> dict[str, int]:
        """This model's values in ``stage``: its own for ``stage`` over its shared ones."""
        only_here: ScalingSettings = getattr(self, stage)
        return {**self.given(), **only_here.given()}


class ConcurrencyBudget(_Strict):
    """How a stage splits the account's Lambda concurrency, and the API's own limits.

    Each function family gets reserved concurrency: at most this many of its
    invocations run at once, and as many are kept for it whatever else runs. A
    family whose function is made per model (sync predict, streamed generation)
    reserves its number for each such function. The reservations together must
    leave Lambda's unreserved minimum (100) of ``account_limit``, which the
    manifest checks (:meth:`Manifest.reserved_concurrency`). docs/deploying.md
    has the quotas this asks for.

    A pooled model's router is the exception while ``pooled_predict`` is unset: it
    reserves nothing and draws on the account's unreserved concurrency, so that a
    catalogue of many small models fits in an account (a reservation of 0 would
    stop the function, so none is rendered). Each tenant is still held to its
    tier's ``max_sync_requests``, counted across every router.
    """

    account_limit: int = Field(
        default=1_000,
        ge=UNRESERVED_CONCURRENCY_MINIMUM,
        description="The account's concurrent executions in the region (Service Quotas L-B99A9384)",
    )
    authorizer: int = Field(default=50, ge=1, description="Reserved for the key authorizer")
    predict: int = Field(
        default=100,
        ge=1,
        description="Reserved for each sync predict router (one per model that does not "
        "generate and has a worker service of its own)",
    )
    pooled_predict: int | None = Field(
        default=None,
        ge=1,
        description="Reserved for each pooled model's predict router; unset, they reserve "
        "nothing and share the account's unreserved concurrency (each tenant still held "
        "to its tier's `max_sync_requests`)",
    )
    generation: int = Field(
        default=50,
        ge=1,
        description="Reserved for each streamed generation router (one per generation model)",
    )
    openai: int = Field(
        default=100, ge=1, description="Reserved for the OpenAI-compatible API's function"
    )
    jobs: int = Field(
        default=20,
        ge=1,
        description="Reserved for the function of the catalog, async status and batch jobs",
    )
    splitter: int = Field(
        default=10, ge=1, description="Reserved for the batch splitter (dropped files)"
    )
    authorizer_cache_seconds: int = Field(
        default=60,
        ge=0,
        le=3_600,
        description="API Gateway caches the authorizer's answer per key this long (0: every "
        "request invokes it, garbage keys included)",
    )
    throttle_rate: float = Field(
        default=1_000,
        gt=0,
        le=API_ACCOUNT_RATE,
        description="The stage's throttle in requests a second, across every tenant (each "
        "tenant's own is its tier's)",
    )
    throttle_burst: int = Field(
        default=2_000, gt=0, le=API_ACCOUNT_BURST, description="The stage's throttle's burst"
    )

    @staticmethod
    def router_family(spec: ModelSpec) -> str:
        """The family of a model's router: ``generation``, ``pooled_predict`` or
        ``predict``."""
        if spec.generates:
            return "generation"
        return "pooled_predict" if spec.pool is not None else "predict"

    def router_reservation(self, spec: ModelSpec) -> int | None:
        """What a model's router reserves: its family's number, or None (no
        reservation: the account's unreserved share) for a pooled model's while
        ``pooled_predict`` is unset. Never 0, which would stop the function."""
        reserved: int | None = getattr(self, self.router_family(spec))
        return reserved


class DropRetention(_Strict):
    """How long the drop bucket keeps what tenants drop there and what jobs write
    beside it (inputs, ``.out`` outputs): a lifecycle rule per tenant prefix."""

    retention_days: int = Field(
        default=30,
        ge=1,
        le=3_650,
        description="Objects under a tenant's prefix expire this long after they are "
        "written (a tenant's own `drop_retention_days` overrides it)",
    )
    noncurrent_days: int = Field(
        default=7,
        ge=1,
        le=365,
        description="A version replaced or deleted (the bucket is versioned) is kept this long",
    )
    incomplete_upload_days: int = Field(
        default=2,
        ge=1,
        le=30,
        description="An upload left unfinished (a job's output is written in parts) is "
        "aborted after this long",
    )


class StageSettings(_Strict):
    """What differs between the stages (``dev``, ``prod``)."""

    config_deployment: Literal["AllAtOnce", "Linear"] = Field(
        description="How AppConfig rolls out a routing document: at once, or in linear "
        "steps (20 % over 10 minutes)"
    )
    config_bake_minutes: int = Field(
        default=0,
        description="AppConfig watches the canary alarms this long after a rollout, and "
        "rolls the change back if one goes off",
    )
    private_workers: bool = Field(
        description="Cloud workers in private subnets behind NAT gateways (paid for while "
        "idle), or in public subnets with no inbound rule"
    )
    scaling: ScalingSettings = Field(
        description="Every model's scaling in this stage (every field required)"
    )
    concurrency: ConcurrencyBudget = Field(
        default=ConcurrencyBudget(),
        description="How the stage splits the account's Lambda concurrency, and API "
        "Gateway's stage-wide limits",
    )
    drop: DropRetention = Field(
        default=DropRetention(), description="How long the drop bucket keeps files"
    )
    api_gateway_cloudwatch_role: bool = Field(
        default=False,
        description="Give API Gateway its account-level CloudWatch role "
        "(AWS::ApiGateway::Account, one per account and region: a deploy overwrites "
        "whatever role was set). Only for an account and region that have none yet",
    )

    @model_validator(mode="after")
    def _scaling_complete(self) -> StageSettings:
        missing = [
            name for name in ScalingSettings.model_fields if name not in self.scaling.given()
        ]
        if missing:
            raise ValueError(
                f"scaling: missing {', '.join(missing)} (a stage gives every model's default)"
            )
        return self


class RolloutLimits(_Strict):
    """When a canary is rolled back: over an absolute limit, and worse than the
    stable version over the same window by a margin (``switchyard.canary`` has
    the exact rule)."""

    window_seconds: int = Field(
        ge=10, le=3600, description="The metrics window a decision looks at"
    )
    min_requests: int = Field(
        ge=1,
        description="Fewer requests in the window: a canary is not judged, a stable version "
        "is no baseline",
    )
    max_error_rate: float = Field(
        gt=0, le=1, description="A canary is rolled back for errors only over this rate"
    )
    max_error_rate_over_stable: float = Field(
        ge=0,
        le=1,
        description="... and only if its error rate is this much above the stable version's",
    )
    max_p99_ratio: float = Field(
        gt=1,
        description="A canary over its model's `slo_p99_ms` is rolled back only if its p99 is "
        "more than this multiple of the stable version's",
    )
    # The test's normal approximation says nothing of two or three.
    noise_z: float = Field(
        default=4.0,
        ge=0,
        le=10,
        description="Standard errors of sampling noise a canary's excess of errors (or of "
        "requests over the SLO) must also clear",
    )
    noise_min_count: int = Field(
        default=5,
        ge=1,
        description="... and how many such requests of its own it must have at least",
    )


class Tier(_Strict):
    """A usage-plan tier: API Gateway holds each key of it to these limits, the
    routers cap what one tenant holds at once (over a cap: 429 with Retry-After,
    ``switchyard.admission``), and the workers weigh its tenants' share of a batch."""

    rate: float = Field(gt=0, description="Requests a second, per key (API Gateway's)")
    burst: int = Field(gt=0, description="Requests at once over the rate, per key")
    quota_per_day: int = Field(gt=0, description="Requests a day, per key")
    max_streams: int = Field(default=4, ge=1, description="A tenant's streamed generations at once")
    max_sync_requests: int = Field(
        default=32,
        ge=1,
        description="A tenant's sync requests waiting for their answer at once (predict, a "
        "generation not streamed, the OpenAI API's)",
    )
    max_queued: int = Field(
        default=1_000,
        ge=1,
        le=1_000_000,
        description="A tenant's requests queued or running on one model at once, async and "
        "sync (predict, generate, the OpenAI API's; batch jobs' lines are not counted): one "
        "more is refused, 429 queue_full with Retry-After",
    )
    weight: int = Field(
        default=1,
        ge=1,
        le=100,
        description="A tenant's share of a worker's batches against other tenants' with "
        "work in hand: a turn of the batcher takes up to this many of its messages",
    )


class Tenant(_Strict):
    """A tenant: an API key in its tier's usage plan, a prefix of the drop bucket, a
    webhook secret, and its own results."""

    tier: str = Field(description="Its tier (a `[tiers.<tier>]`)")
    drop_retention_days: int | None = Field(
        default=None,
        ge=1,
        le=3_650,
        description="Days the drop bucket keeps this tenant's files and job outputs, in "
        "every stage (default: the stage's `drop.retention_days`)",
    )
    account_id: str | None = Field(
        default=None,
        pattern=r"^\d{12}$",
        description="The AWS account of the tenant's data team: its drop role trusts that "
        "account (default: the account the platform is deployed in)",
    )
    monthly_budget_usd: float | None = Field(
        default=None,
        ge=0,
        description="What the tenant may spend a calendar month (UTC), in USD, by its "
        "requests' costs: at 80 % an alarm, at 100 % its new work is refused (429 "
        "budget_exceeded) or moved to the batch lane (`over_budget`); "
        "`switchyard budget set` raises it without a deploy (default: no budget)",
    )
    over_budget: Literal["refuse", "batch"] = Field(
        default="refuse",
        description="Over its budget, the tenant's new realtime work is refused (429 "
        'budget_exceeded), or moved to the batch lane ("batch": it waits for spare '
        "capacity, and its batch jobs still run); streams are refused either way",
    )

    @model_validator(mode="after")
    def _over_budget_needs_a_budget(self) -> Tenant:
        if self.over_budget != "refuse" and self.monthly_budget_usd is None:
            raise ValueError("over_budget needs monthly_budget_usd: the tenant has no budget")
        return self


class ModelSpec(_Strict):
    """Everything the platform needs to give a model its endpoint."""

    runtime: Literal[
        "sentence-transformers", "torchscript-classifier", "onnx-classifier", "causal-lm"
    ] = Field(
        description="What loads and runs the artifact: a sentence-transformers folder "
        "(embeddings), a TorchScript classifier, an ONNX classifier (ONNX Runtime), or a "
        "Hugging Face causal language model (generation)"
    )
    compute: Literal["cpu", "gpu"] = Field(
        description="The worker hosts it runs on in the cloud: the CPU or the GPU capacity "
        "provider (and their task size)"
    )
    instance_types: tuple[str, ...] = Field(
        default=(),
        description="EC2 instance types of its capacity provider, in order of preference "
        "(the first is the launch template's); a model in a pool runs on its pool's",
    )
    pool: str | None = Field(
        default=None,
        description="The pool (`[pools.<name>]`) whose workers run it beside other models, "
        "loaded on first use; without one it has a worker service of its own",
    )
    cpu_capable: bool = Field(
        default=False,
        description="A model of a GPU pool that also runs on a CPU: its pool's "
        "`overflow_pool` takes its work while the GPU pool has no worker running, or "
        "while its oldest message is older than the pool's `cpu_overflow_after_ms`",
    )
    signature: Signature = Field(
        description="What each input is, checked by the router and again by the worker: "
        '`{ kind = "text", max_chars }` (a string); `{ kind = "tensor", shape = [n], '
        "minimum, maximum }` (a flat list of n numbers in a range); "
        '`{ kind = "generation", context_length, max_tokens, max_chars }` (a prompt, or a '
        "generation request)"
    )
    labels: tuple[str, ...] = Field(
        default=(), description="A classifier's label of each class, in class order"
    )
    max_inputs_per_request: int = Field(gt=0, le=1024, description="Inputs one request may carry")
    max_batch_size: int = Field(
        gt=0,
        le=1024,
        description="Inputs a worker runs together at most (a generation model: sequences "
        "decoded together)",
    )
    max_wait_ms: int = Field(
        ge=0,
        le=10_000,
        description="How long a forming batch's oldest message may wait for more",
    )
    default_deadline_ms: int = Field(
        gt=0,
        le=29_000,
        description="How long a sync caller waits for the answer when it sends no "
        "`x-deadline-ms`; then 202 with the request's Location",
    )
    slo_p99_ms: int = Field(
        gt=0,
        le=29_000,
        description="The p99 latency a canary must stay under: one over it and over the "
        "stable version's is rolled back",
    )
    result_cache_seconds: int = Field(
        default=0,
        ge=0,
        le=7 * 86_400,
        description="Repeated inputs are answered from the result cache for this long; 0 "
        "for a model whose outputs are not a function of its inputs alone",
    )
    scaling: ModelScaling = Field(
        default=ModelScaling(),
        description="This model's overrides of its stages' scaling values",
    )
    demo_versions: tuple[str, ...] = Field(
        default=(),
        description="Versions the local platform registers at start from its built "
        "artifacts (`build/models/<model>/<version>/`); the first takes all traffic in "
        "the first routing document, locally and in the cloud (v1 without them)",
    )

    @model_validator(mode="after")
    def _runs_somewhere(self) -> ModelSpec:
        if self.pool is None and not self.instance_types:
            raise ValueError("instance_types: a model with a service of its own names them")
        if self.pool is not None and self.instance_types:
            raise ValueError(f"instance_types: a model in pool {self.pool!r} runs on the pool's")
        if self.pool is not None and self.generates:
            raise ValueError(
                f"pool: a generation model keeps a service of its own (pool {self.pool!r} "
                "runs micro-batch models: embedders and classifiers)"
            )
        if self.cpu_capable and self.compute != "gpu":
            raise ValueError("cpu_capable: a CPU model runs on a CPU already")
        if self.cpu_capable and self.pool is None:
            raise ValueError("cpu_capable: only a model of a GPU pool overflows to a CPU pool")
        if self.pool is not None and self.scaling != ModelScaling():
            raise ValueError(
                f"scaling: a model in pool {self.pool!r} scales with the pool "
                f"([pools.{self.pool}.scaling])"
            )
        return self

    @property
    def first_version(self) -> str:
        """The version the first routing document gives all traffic to, locally and in
        the cloud: the first demo version, else v1 (registered with `models register`)."""
        return self.demo_versions[0] if self.demo_versions else "v1"

    @property
    def generates(self) -> bool:
        """A generative model: its router streams tokens and serves /generate."""
        return self.signature.kind == "generation" or self.runtime == "causal-lm"

    def version_record(
        self, model: str, version: str, artifact_uri: str, sha256: str, **extra: Any
    ) -> ModelVersion:
        """A registry record for a new version, with this model's defaults."""
        return ModelVersion(
            model=model,
            version=version,
            runtime=self.runtime,
            artifact_uri=artifact_uri,
            sha256=sha256,
            signature=self.signature,
            labels=self.labels,
            max_inputs_per_request=self.max_inputs_per_request,
            max_batch_size=self.max_batch_size,
            max_wait_ms=self.max_wait_ms,
            default_deadline_ms=self.default_deadline_ms,
            result_cache_seconds=self.result_cache_seconds,
            **extra,
        )


class PoolSpec(_Strict):
    """A worker service that serves many models (``[pools.<name>]``): each worker
    long-polls the queues of all the pool's models, loads a version on first use and
    keeps the versions it has loaded within its memory budget, evicting the least
    recently used. Queues, routers, routing documents and metrics stay per model."""

    compute: Literal["cpu", "gpu"] = Field(
        description="The worker hosts it runs on in the cloud: the CPU or the GPU capacity "
        "provider (and their task size); its models say the same"
    )
    instance_types: tuple[str, ...] = Field(
        min_length=1,
        description="EC2 instance types of its capacity provider, in order of preference",
    )
    memory_budget_mib: int = Field(
        ge=64,
        description="Host memory a worker may give its loaded models, MiB (each version's "
        "footprint is measured when it loads)",
    )
    device_memory_budget_mib: int | None = Field(
        default=None,
        ge=64,
        description="GPU memory a worker may give its loaded models, MiB (GPU pools only)",
    )
    scaling: ModelScaling = Field(
        default=ModelScaling(),
        description="This pool's overrides of its stages' scaling values, over the sum of "
        "its models' work",
    )
    overflow_pool: str | None = Field(
        default=None,
        description="A GPU pool's CPU pool, which also serves this pool's `cpu_capable` "
        "models when their work would otherwise wait (see `cpu_overflow_after_ms`)",
    )
    cpu_overflow_after_ms: int = Field(
        default=2000,
        ge=0,
        le=900_000,
        description="A `cpu_capable` model's work goes to the overflow pool once its "
        "oldest message is older than this, or at once while this pool has no worker "
        "running (in AWS the age is SQS's one-minute metric: docs/scaling.md)",
    )

    @model_validator(mode="after")
    def _device_budget(self) -> PoolSpec:
        if self.compute == "gpu" and self.device_memory_budget_mib is None:
            raise ValueError("device_memory_budget_mib: a GPU pool has one")
        if self.compute == "cpu" and self.device_memory_budget_mib is not None:
            raise ValueError("device_memory_budget_mib: a CPU pool has no GPU memory")
        if self.compute == "cpu" and self.overflow_pool is not None:
            raise ValueError("overflow_pool: a CPU pool's work has nowhere cheaper to go")
        return self


class Manifest(_Strict):
    """The whole manifest (``manifest.toml``)."""

    platform: PlatformSettings = Field(description="Settings of the whole platform")
    rollout: RolloutLimits = Field(description="When a canary is rolled back")
    stages: dict[Stage, StageSettings] = Field(description="Each stage's settings")
    tiers: dict[str, Tier] = Field(description="Usage-plan tiers, by name")
    tenants: dict[str, Tenant] = Field(description="Tenants, by name")
    models: dict[str, ModelSpec] = Field(
        description="Models, by name (2-40 of a-z, 0-9 and '-'); each gets its whole endpoint"
    )
    pools: dict[str, PoolSpec] = Field(
        default_factory=dict,
        description="Worker pools, by name (as a model's): each serves the models that name it",
    )
    prices: PriceTable = Field(
        default_factory=PriceTable,
        description="What each request's cost is priced at (USD, list prices, us-east-1): "
        "the instance types per hour and each AWS request (docs/costs.md); any left out "
        "keeps its default, and `instances_per_hour` adds to the types known",
    )

    @model_validator(mode="after")
    def _check_references(self) -> Manifest:
        for name, tenant in self.tenants.items():
            if tenant.tier not in self.tiers:
                raise ValueError(f"tenants.{name}.tier: unknown tier {tenant.tier!r}")
        for name in self.models:
            if not _MODEL_NAME.fullmatch(name):
                raise ValueError(f"models.{name}: a model name is 2-40 of a-z, 0-9 and '-'")
            for stage in self.stages:
                try:
                    self.scaling_policy(name, stage)
                except ValueError as error:
                    raise ValueError(f"models.{name}.scaling, in {stage}: {error}") from None
        for name, spec in self.models.items():
            if spec.pool is None:
                continue
            pool = self.pools.get(spec.pool)
            if pool is None:
                raise ValueError(f"models.{name}.pool: unknown pool {spec.pool!r}")
            if pool.compute != spec.compute:
                raise ValueError(
                    f"models.{name}.compute: {spec.compute}, but pool {spec.pool!r} is "
                    f"{pool.compute}"
                )
        for name in self.pools:
            if not _MODEL_NAME.fullmatch(name):
                raise ValueError(f"pools.{name}: a pool name is 2-40 of a-z, 0-9 and '-'")
            if name in self.models:
                raise ValueError(f"pools.{name}: a model has that name (a service each)")
            if not self.pool_models(name) and not self.overflow_models(name):
                raise ValueError(f"pools.{name}: no model names it (`pool = {name!r}`)")
            self._check_overflow(name)
            for stage in self.stages:
                try:
                    self.pool_scaling_policy(name, stage)
                except ValueError as error:
                    raise ValueError(f"pools.{name}.scaling, in {stage}: {error}") from None
        for service in self.services():
            try:
                self.cost_rates(service)
            except ValueError as error:
                raise ValueError(f"{service}: {error}") from None
        for stage in self.stages:
            self._check_concurrency(stage)
        return self

    def pool_models(self, pool: str) -> tuple[str, ...]:
        """The models ``pool`` serves, in manifest order."""
        return tuple(name for name, spec in self.models.items() if spec.pool == pool)

    def _check_overflow(self, pool: str) -> None:
        spec = self.pools[pool]
        capable = [m for m in self.pool_models(pool) if self.models[m].cpu_capable]
        if spec.overflow_pool is None:
            if capable:
                raise ValueError(
                    f"models.{capable[0]}.cpu_capable: its pool {pool!r} names no overflow_pool"
                )
            return
        target = self.pools.get(spec.overflow_pool)
        if target is None or target.compute != "cpu":
            raise ValueError(
                f"pools.{pool}.overflow_pool: {spec.overflow_pool!r} is not a CPU pool of "
                "this manifest"
            )
        if not capable:
            raise ValueError(
                f"pools.{pool}.overflow_pool: none of its models is cpu_capable, so none "
                "would overflow"
            )

    def overflow_models(self, pool: str) -> dict[str, OverflowSource]:
        """The models whose work CPU pool ``pool`` also takes when their GPU pool
        cannot (``cpu_capable`` models of a pool whose ``overflow_pool`` it is)."""
        return {
            model: OverflowSource(pool=source, after_ms=spec.cpu_overflow_after_ms)
            for source, spec in self.pools.items()
            if spec.overflow_pool == pool
            for model in self.pool_models(source)
            if self.models[model].cpu_capable
        }

    def pool_worker_values(self, pool: str) -> dict[str, Any]:
        """What a pool's workers are told (``WorkerSettings``), the same in the CDK
        app and locally: the models it serves, its budgets, the models it takes on
        overflow, and whether its workers say they are running (a pool that
        overflows: its overflow pool reads that)."""
        spec = self.pools[pool]
        return {
            "worker_pool": pool,
            "worker_models": list(self.pool_models(pool)),
            "memory_budget_mib": spec.memory_budget_mib,
            "device_memory_budget_mib": spec.device_memory_budget_mib,
            "overflow": {m: s.model_dump() for m, s in self.overflow_models(pool).items()},
            "pool_heartbeat": spec.overflow_pool is not None,
        }

    def worker_settings_values(self) -> dict[str, Any]:
        """What every worker is told (``WorkerSettings``) besides its service, the
        same in the CDK app and locally: each tenant's weight in its batches."""
        return {
            "tenant_weights": {
                name: self.tiers[tenant.tier].weight for name, tenant in self.tenants.items()
            }
        }

    def cost_rates(self, service: str) -> CostRates:
        """What a worker service's workers price each request with: its first
        instance type's price (a model's own, or its pool's) and each AWS request's,
        from ``[prices]``."""
        spec = self.pools[service] if service in self.pools else self.models[service]
        return CostRates.of(self.prices, spec.instance_types[0])

    def service_models(self, service: str) -> tuple[str, ...]:
        """Every model whose queues ``service``'s workers take work from: its own, and
        for a CPU pool the models it takes on overflow."""
        if service not in self.pools:
            return (service,)
        return (*self.pool_models(service), *self.overflow_models(service))

    def services(self) -> dict[str, tuple[str, ...]]:
        """Each worker service and the models it serves: a model with a service of its
        own under its name (serving itself), then each pool under its name."""
        own = {name: (name,) for name, spec in self.models.items() if spec.pool is None}
        return {**own, **{pool: self.pool_models(pool) for pool in self.pools}}

    @model_validator(mode="after")
    def _drop_outlives_jobs(self) -> Manifest:
        # A finished job's record names its output until the record expires (the
        # results' TTL): the output must still be there.
        job_days = math.ceil(self.platform.result_ttl_seconds / 86_400)
        for stage in self.stages:
            for tenant in self.tenants:
                days = self.drop_retention_days(tenant, stage)
                if days < job_days:
                    raise ValueError(
                        f"tenants.{tenant}: the drop bucket would keep its files {days} "
                        f"days in {stage}, less than the {job_days} days a job's record "
                        "(platform.result_ttl_seconds) names its output"
                    )
        return self

    def drop_retention_days(self, tenant: str, stage: Stage) -> int:
        """Days the drop bucket keeps ``tenant``'s objects in ``stage``."""
        own = self.tenants[tenant].drop_retention_days
        return own if own is not None else self.stages[stage].drop.retention_days

    def reserved_concurrency(self, stage: Stage) -> dict[str, int]:
        """Function family -> what its functions reserve together in ``stage`` (a
        per-model family: its number times the models that have such a router;
        pooled routers while ``pooled_predict`` is unset: 0, they reserve nothing)."""
        budget = self.stages[stage].concurrency
        routers = dict.fromkeys(("predict", "pooled_predict", "generation"), 0)
        for spec in self.models.values():
            routers[budget.router_family(spec)] += budget.router_reservation(spec) or 0
        return {
            "authorizer": budget.authorizer,
            **routers,
            "openai": budget.openai,
            "jobs": budget.jobs,
            "splitter": budget.splitter,
        }

    def _check_concurrency(self, stage: Stage) -> None:
        budget = self.stages[stage].concurrency
        where = f"stages.{stage}.concurrency"
        reserved = self.reserved_concurrency(stage)
        room = budget.account_limit - UNRESERVED_CONCURRENCY_MINIMUM
        if sum(reserved.values()) > room:
            split = ", ".join(f"{family} {n}" for family, n in reserved.items())
            raise ValueError(
                f"{where}: the functions reserve {sum(reserved.values())} ({split}); "
                f"account_limit {budget.account_limit} leaves {room} after Lambda's "
                f"unreserved minimum of {UNRESERVED_CONCURRENCY_MINIMUM}"
            )
        # A tenant at its cap must leave room in each function for another tenant:
        # in each reservation, and in the unreserved share that pooled routers
        # without one draw on.
        shared = budget.pooled_predict is None and any(
            spec.pool is not None for spec in self.models.values()
        )
        unreserved = budget.account_limit - sum(reserved.values())
        for name, tier in self.tiers.items():
            for cap, families in (
                ("max_sync_requests", ("predict", "pooled_predict", "openai")),
                ("max_streams", ("generation", "openai")),
            ):
                for family in families:
                    limit = getattr(budget, family)
                    if limit is not None and getattr(tier, cap) >= limit:
                        raise ValueError(
                            f"tiers.{name}.{cap}: {getattr(tier, cap)} is not under "
                            f"{where}.{family} ({limit}): one tenant could hold every "
                            "instance of that function"
                        )
            if shared and tier.max_sync_requests >= unreserved:
                raise ValueError(
                    f"tiers.{name}.max_sync_requests: {tier.max_sync_requests} is not under "
                    f"the {unreserved} of {where}.account_limit left unreserved, which the "
                    "pooled models' routers share (pooled_predict unset): one tenant could "
                    "hold all of it"
                )

    def scaling_policy(self, model: str, stage: str) -> ScalingPolicy:
        """``model``'s scaling in ``stage``: the stage's values, overridden by the
        model's for every stage, overridden by the model's for this stage."""
        return self._policy("model", model, self.models, stage)

    def pool_scaling_policy(self, pool: str, stage: str) -> ScalingPolicy:
        """``pool``'s scaling in ``stage`` (over the sum of its models' work): the
        stage's values, overridden by the pool's, as a model's are."""
        return self._policy("pool", pool, self.pools, stage)

    def _policy(
        self, what: str, name: str, table: Mapping[str, ModelSpec | PoolSpec], stage: str
    ) -> ScalingPolicy:
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}: the manifest defines {sorted(self.stages)}")
        if name not in table:
            raise ValueError(f"unknown {what} {name!r}: the manifest defines {sorted(table)}")
        known = cast(Stage, stage)
        values = {
            **self.stages[known].scaling.given(),
            **table[name].scaling.for_stage(known),
        }
        return ScalingPolicy(**values)

    def names(self, stage: str) -> ResourceNames:
        return ResourceNames(prefix=self.platform.prefix, stage=stage)

    def settings_values(self, stage: str) -> dict[str, Any]:
        """What every process's settings (``switchyard.settings``) take from the
        manifest; each substrate adds where its resources are. The CDK app and the
        local platform both start from this, so the two read the same numbers."""
        p = self.platform
        return {
            "stage": stage,
            "result_ttl_seconds": p.result_ttl_seconds,
            "claim_check_bytes": p.claim_check_bytes,
            "result_inline_bytes": p.result_inline_bytes,
            "visibility_timeout_seconds": p.visibility_timeout_seconds,
            "max_receive_count": p.max_receive_count,
            "max_age_seconds": dict(p.max_age_seconds),
            "sync_grace_seconds": p.sync_grace_seconds,
        }

    def budget_values(self) -> dict[str, Any]:
        """What holds tenants to their budgets (the routers, the batch splitter) takes
        from the manifest."""
        return {
            "tenant_budgets": {
                name: {"monthly_usd": tenant.monthly_budget_usd, "over_budget": tenant.over_budget}
                for name, tenant in self.tenants.items()
                if tenant.monthly_budget_usd is not None
            }
        }

    def budgeted_tenants(self) -> list[str]:
        """The tenants held to a monthly budget."""
        return [name for name, t in self.tenants.items() if t.monthly_budget_usd is not None]

    def router_settings_values(self) -> dict[str, Any]:
        """What the router's settings take from the manifest besides the common ones."""
        return {
            "max_body_bytes": self.platform.max_body_bytes,
            "tenant_limits": {
                name: {
                    "streams": self.tiers[tenant.tier].max_streams,
                    "sync_requests": self.tiers[tenant.tier].max_sync_requests,
                    "queued": self.tiers[tenant.tier].max_queued,
                }
                for name, tenant in self.tenants.items()
            },
            **self.budget_values(),
        }


class ResourceNames(_Strict):
    """Names of every resource, the same in the cloud and on the emulator."""

    prefix: str
    stage: str

    @property
    def base(self) -> str:
        return f"{self.prefix}-{self.stage}"

    @property
    def registry_table(self) -> str:
        return f"{self.base}-registry"

    @property
    def results_table(self) -> str:
        return f"{self.base}-results"

    @property
    def jobs_table(self) -> str:
        return f"{self.base}-jobs"

    @property
    def webhook_secret_prefix(self) -> str:
        """Secrets Manager names of the tenants' webhook secrets: this and the tenant."""
        return f"{self.prefix}/{self.stage}/webhook/"

    @property
    def artifacts_bucket(self) -> str:
        return f"{self.base}-artifacts"

    @property
    def payloads_bucket(self) -> str:
        return f"{self.base}-payloads"

    @property
    def batch_drop_bucket(self) -> str:
        return f"{self.base}-batch-drop"

    @property
    def batch_drop_queue(self) -> str:
        """Where the drop bucket's ObjectCreated notifications go; the splitter reads it."""
        return f"{self.base}-batch-drop"

    @property
    def batch_drop_dlq(self) -> str:
        return f"{self.base}-batch-drop-dlq"

    @property
    def prediction_logs_bucket(self) -> str:
        return f"{self.base}-prediction-logs"

    @property
    def prediction_log_stream(self) -> str:
        return f"{self.base}-predictions"

    @property
    def appconfig_application(self) -> str:
        return f"{self.base}-routing"

    @property
    def rest_api(self) -> str:
        return f"{self.base}-api"

    def queue(self, model: str, lane: str) -> str:
        return f"{self.base}-{model}-{lane}"

    def dlq(self, model: str, lane: str) -> str:
        return f"{self.base}-{model}-{lane}-dlq"

    def routing_profile(self, model: str) -> str:
        return model

    def deployment_strategy(self, kind: str) -> str:
        """The AppConfig strategy that rolls out routing documents (``AllAtOnce``...)."""
        return f"{self.base}-{kind.lower()}"

    @staticmethod
    def cloud_bucket(name: str, account: str, region: str) -> str:
        """S3 names are global: in AWS a bucket's name gets the account and region."""
        return f"{name}-{account}-{region}"

    def usage_plan(self, tier: str) -> str:
        return f"{self.base}-{tier}"

    def api_key(self, tenant: str) -> str:
        return f"{self.base}-{tenant}"


def load_manifest(path: Path | str) -> Manifest:
    """Read and validate the manifest; a mistake names the field that is wrong."""
    with open(path, "rb") as fh:
        return Manifest.model_validate(tomllib.load(fh))
