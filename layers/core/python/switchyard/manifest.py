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
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    prefix: str = Field(pattern=r"^[a-z][a-z0-9-]{1,20}$")
    region: str
    result_ttl_seconds: int = Field(gt=0)
    claim_check_bytes: int = Field(gt=0, le=250_000)
    result_inline_bytes: int = Field(default=8_192, gt=0, le=350_000)
    max_receive_count: int = Field(ge=1, le=1000)
    visibility_timeout_seconds: int = Field(ge=10, le=43_200)
    max_body_bytes: int = Field(gt=0, le=6_000_000)
    message_retention_seconds: int = Field(ge=60, le=1_209_600)
    dlq_retention_seconds: int = Field(ge=60, le=1_209_600)
    splitter_timeout_seconds: int = Field(default=300, ge=10, le=900)  # Lambda's limit
    # How long work may wait before it runs, per lane, for async and batch work; a
    # sync request's work expires at its deadline plus ``sync_grace_seconds`` (the
    # caller who got 202 at the deadline may still collect it). Work past its
    # expiry is answered "expired" without running.
    max_age_seconds: dict[Lane, int] = Field(
        default_factory=lambda: {"realtime": 3_600, "batch": 86_400}
    )
    sync_grace_seconds: int = Field(default=60, ge=0, le=3_600)

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

    min_tasks: int | None = Field(default=None, ge=0)
    max_tasks: int | None = Field(default=None, ge=1, le=_MAX_TASKS)
    backlog_per_task: int | None = Field(default=None, ge=1)
    target_age_seconds: int | None = Field(default=None, ge=1)
    scale_out_cooldown_seconds: int | None = Field(default=None, ge=0, le=3_600)
    scale_in_cooldown_seconds: int | None = Field(default=None, ge=0, le=3_600)
    # The cloud counts idleness in one-minute periods: whole minutes only.
    idle_seconds: int | None = Field(default=None, ge=60, le=86_400, multiple_of=60)

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

    dev: ScalingSettings = ScalingSettings()
    prod: ScalingSettings = ScalingSettings()

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
    """

    # The account's concurrent executions in the region (Service Quotas L-B99A9384).
    account_limit: int = Field(default=1_000, ge=UNRESERVED_CONCURRENCY_MINIMUM)
    authorizer: int = Field(default=50, ge=1)  # the key authorizer
    predict: int = Field(default=100, ge=1)  # each sync predict router (one per model)
    generation: int = Field(default=50, ge=1)  # each streamed generation router (per model)
    openai: int = Field(default=100, ge=1)  # the OpenAI-compatible API's function
    jobs: int = Field(default=20, ge=1)  # catalog, async status and batch jobs
    splitter: int = Field(default=10, ge=1)  # the batch splitter (dropped files)
    # API Gateway caches the authorizer's answer per key this long (0: every
    # request invokes it, garbage keys included).
    authorizer_cache_seconds: int = Field(default=60, ge=0, le=3_600)
    # The stage's throttle, across every tenant (each tenant's is its tier's).
    throttle_rate: float = Field(default=1_000, gt=0, le=API_ACCOUNT_RATE)
    throttle_burst: int = Field(default=2_000, gt=0, le=API_ACCOUNT_BURST)


class DropRetention(_Strict):
    """How long the drop bucket keeps what tenants drop there and what jobs write
    beside it (inputs, ``.out`` outputs): a lifecycle rule per tenant prefix."""

    # Objects under a tenant's prefix expire this long after they are written (a
    # tenant's own ``drop_retention_days`` overrides it).
    retention_days: int = Field(default=30, ge=1, le=3_650)
    # A version replaced or deleted (the bucket is versioned) is kept this long.
    noncurrent_days: int = Field(default=7, ge=1, le=365)
    # An upload left unfinished (a job's output is written in parts) is aborted.
    incomplete_upload_days: int = Field(default=2, ge=1, le=30)


class StageSettings(_Strict):
    config_deployment: Literal["AllAtOnce", "Linear"]
    config_bake_minutes: int = 0
    # Cloud workers in private subnets behind NAT gateways (paid for while idle),
    # or in public subnets with no inbound rule.
    private_workers: bool
    scaling: ScalingSettings
    concurrency: ConcurrencyBudget = ConcurrencyBudget()
    drop: DropRetention = DropRetention()
    # Give API Gateway its account-level CloudWatch role (AWS::ApiGateway::Account,
    # one per account and region: a deploy overwrites whatever role was set). Only
    # for an account and region that have none yet (docs/deploying.md).
    api_gateway_cloudwatch_role: bool = False

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

    window_seconds: int = Field(ge=10, le=3600)
    min_requests: int = Field(ge=1)
    max_error_rate: float = Field(gt=0, le=1)
    max_error_rate_over_stable: float = Field(ge=0, le=1)
    max_p99_ratio: float = Field(gt=1)
    # Standard errors of sampling noise a canary's excess of errors (or of requests
    # over the SLO) must also clear, and how many of them it must have at least: the
    # test's normal approximation says nothing of two or three.
    noise_z: float = Field(default=4.0, ge=0, le=10)
    noise_min_count: int = Field(default=5, ge=1)


class Tier(_Strict):
    rate: float = Field(gt=0)
    burst: int = Field(gt=0)
    quota_per_day: int = Field(gt=0)
    # A tenant's streamed generations at once, and its sync requests waiting for
    # their answer at once (predict, a generation not streamed, the OpenAI API's):
    # over either the router answers 429 with Retry-After (switchyard.admission).
    max_streams: int = Field(default=4, ge=1)
    max_sync_requests: int = Field(default=32, ge=1)


class Tenant(_Strict):
    tier: str
    # Days the drop bucket keeps this tenant's files and job outputs, in every
    # stage (default: the stage's ``drop.retention_days``).
    drop_retention_days: int | None = Field(default=None, ge=1, le=3_650)
    # The AWS account of the tenant's data team: its drop role trusts that account
    # (default: the account the platform is deployed in).
    account_id: str | None = Field(default=None, pattern=r"^\d{12}$")


class ModelSpec(_Strict):
    """Everything the platform needs to give a model its endpoint."""

    runtime: Literal["sentence-transformers", "torchscript-classifier", "causal-lm"]
    compute: Literal["cpu", "gpu"]
    instance_types: tuple[str, ...]
    signature: Signature
    labels: tuple[str, ...] = ()
    max_inputs_per_request: int = Field(gt=0, le=1024)
    max_batch_size: int = Field(gt=0, le=1024)
    max_wait_ms: int = Field(ge=0, le=10_000)
    default_deadline_ms: int = Field(gt=0, le=29_000)
    slo_p99_ms: int = Field(gt=0, le=29_000)  # a canary over it and over stable's is rolled back
    # Repeated inputs answered from the result cache for this long; 0 (the default)
    # for a model whose outputs are not a function of its inputs alone.
    result_cache_seconds: int = Field(default=0, ge=0, le=7 * 86_400)
    scaling: ModelScaling = ModelScaling()
    demo_versions: tuple[str, ...] = ()

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


class Manifest(_Strict):
    platform: PlatformSettings
    rollout: RolloutLimits
    stages: dict[Stage, StageSettings]
    tiers: dict[str, Tier]
    tenants: dict[str, Tenant]
    models: dict[str, ModelSpec]

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
        for stage in self.stages:
            self._check_concurrency(stage)
        return self

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
        per-model family: its number times the models that have such a router)."""
        budget = self.stages[stage].concurrency
        generating = sum(1 for spec in self.models.values() if spec.generates)
        return {
            "authorizer": budget.authorizer,
            "predict": budget.predict * (len(self.models) - generating),
            "generation": budget.generation * generating,
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
        # A tenant at its cap must leave room in each function for another tenant.
        for name, tier in self.tiers.items():
            for cap, families in (
                ("max_sync_requests", ("predict", "openai")),
                ("max_streams", ("generation", "openai")),
            ):
                for family in families:
                    if getattr(tier, cap) >= getattr(budget, family):
                        raise ValueError(
                            f"tiers.{name}.{cap}: {getattr(tier, cap)} is not under "
                            f"{where}.{family} ({getattr(budget, family)}): one tenant "
                            "could hold every instance of that function"
                        )

    def scaling_policy(self, model: str, stage: str) -> ScalingPolicy:
        """``model``'s scaling in ``stage``: the stage's values, overridden by the
        model's for every stage, overridden by the model's for this stage."""
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}: the manifest defines {sorted(self.stages)}")
        if model not in self.models:
            raise ValueError(f"unknown model {model!r}: the manifest defines {sorted(self.models)}")
        known = cast(Stage, stage)
        values = {
            **self.stages[known].scaling.given(),
            **self.models[model].scaling.for_stage(known),
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

    def router_settings_values(self) -> dict[str, Any]:
        """What the router's settings take from the manifest besides the common ones."""
        return {
            "max_body_bytes": self.platform.max_body_bytes,
            "tenant_limits": {
                name: {
                    "streams": self.tiers[tenant.tier].max_streams,
                    "sync_requests": self.tiers[tenant.tier].max_sync_requests,
                }
                for name, tenant in self.tenants.items()
            },
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
