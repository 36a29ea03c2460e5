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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from switchyard.schemas import Lane

ENV_PREFIX = "SWITCHYARD_"


class QueuePair(BaseModel):
    """A model's two work queues (URLs)."""

    realtime: str
    batch: str


class Settings(BaseModel):
    """What every process of the platform needs to find its resources."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    stage: str = "dev"
    region: str = "us-east-1"
    # Set only on the local platform: the emulator's address. Unset in the cloud.
    aws_endpoint_url: str | None = None

    registry_table: str
    results_table: str
    payloads_bucket: str
    # Model name -> its queue URLs. A router function in the cloud serves one model;
    # the local router serves every model in the manifest.
    queues: dict[str, QueuePair]

    result_ttl_seconds: int = Field(default=86_400, gt=0)
    # Inputs over this travel in S3 and the queue message carries their key (SQS
    # messages hold 256 KB).
    claim_check_bytes: int = Field(default=200_000, gt=0)
    # Outputs over this are stored in S3 and the result item carries their key.
    result_inline_bytes: int = Field(default=8_192, gt=0, le=350_000)
    # The queues' visibility timeout; workers extend held messages before it ends.
    visibility_timeout_seconds: int = Field(default=60, ge=10)
    # Receives before SQS moves a message to its DLQ: a worker writes the final
    # error of a request on its last one.
    max_receive_count: int = Field(default=5, ge=1)
    # How long work may wait to run (see the manifest's [platform]).
    max_age_seconds: dict[Lane, int] = Field(
        default_factory=lambda: {"realtime": 3_600, "batch": 86_400}
    )
    sync_grace_seconds: int = Field(default=60, ge=0)


class RoutingSettings(Settings):
    """What reads the models' routing documents: the routers, which pick a version
    per request, and whatever records a batch job, which runs on the model's stable
    version."""

    # Where routing documents come from: the AppConfig extension's HTTP API, which
    # the Lambda layer serves on localhost:2772 (and the local platform's stand-in
    # elsewhere); "none" serves each model's newest active version.
    routing_source: Literal["appconfig-extension", "none"] = "none"
    appconfig_extension_url: str = "http://localhost:2772"
    appconfig_application: str = ""
    # Empty: each model's document is in the environment named after the model.
    appconfig_environment: str = ""
    routing_cache_seconds: float = Field(default=5.0, ge=0)


class TenantLimits(BaseModel):
    """What one tenant may hold at once (its tier's, from the manifest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    streams: int = Field(ge=1)
    sync_requests: int = Field(ge=1)


class RouterSettings(RoutingSettings):
    """The router function (one model in the cloud, every model locally)."""

    # Tenant -> the id of its API key, which API Gateway verifies and names in each
    # request's context. The router never sees a key's value.
    tenant_keys: dict[str, str]
    max_body_bytes: int = Field(default=1_048_576, gt=0)
    # Tenant -> its caps on streams and sync requests at once, counted across every
    # router (switchyard.admission); a tenant not named here is not capped.
    tenant_limits: dict[str, TenantLimits] = Field(default_factory=dict)
    # The Retry-After of a request refused at its tenant's cap.
    busy_retry_after_seconds: int = Field(default=5, ge=1, le=3_600)
    # Batch jobs (/v1/jobs), on the router that serves them: where jobs are kept and
    # where submitted inputs are written as a file.
    jobs_table: str | None = None
    batch_drop_bucket: str | None = None
    # The batch-drop queue, where a cancelled job's callback is asked for
    # (switchyard.callbacks).
    drop_queue_url: str | None = None
    # Where a generation model's tokenizer (read from the registry's artifact
    # location, checked against its sha256) is kept once fetched.
    tokenizer_cache: str = "/tmp/switchyard-tokenizers"


class SplitterSettings(RoutingSettings):
    """The batch splitter function."""

    jobs_table: str
    # Its own trigger queue: where it sends the continuation of a split that needs
    # more than one invocation.
    drop_queue_url: str
    # A dropped file is read in ranges of this many bytes (memory stays within a few).
    split_slice_bytes: int = Field(default=4 << 20, ge=1024, le=64 << 20)
    # Slices one invocation reads before it continues in the next (0: as many as
    # Lambda's time allows); for tests and for spreading a large file's split.
    split_max_slices: int = Field(default=0, ge=0)
    # Where the tenants' webhook secrets are (Secrets Manager: this and the
    # tenant): this function delivers jobs' callbacks, signed with them.
    webhook_secret_prefix: str | None = None
    # Whether a callback may reach a loopback, private or link-local address: off in
    # AWS (the URL is a tenant's; switchyard.callbacks), on for the local platform,
    # whose receivers are on loopback.
    callbacks_to_private_addresses: bool = False


class WorkerSettings(Settings):
    """A worker serves every version of one model."""

    worker_model: str
    artifacts_bucket: str
    artifacts_cache: str = "/tmp/switchyard-artifacts"
    # Where the models run: "auto" is the GPU where torch sees one (the GPU image on
    # a GPU host) and the CPU elsewhere; "cuda" fails at load on a host without one.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # An idle worker's long poll of the realtime lane, after which it looks at the
    # batch lane (SQS cannot long-poll two queues at once): batch work waits at most
    # this long to be noticed by an idle worker, while a realtime arrival wakes the
    # poll at once. 1 s costs an idle worker two receives a second (7,200 an hour,
    # under $0.003); a longer poll is cheaper and leaves a dropped file's first
    # chunk waiting. A SIGTERM waits for the poll in progress.
    poll_wait_seconds: int = Field(default=1, ge=0, le=20)
    # Touched once the worker has loaded its versions and polls (the container's
    # health check in ECS, the supervisor locally).
    ready_file: str | None = None
    prediction_log_stream: str | None = None
    # Batch jobs: each chunk's result is counted on its job here, and the worker
    # that answers a job's last chunk writes its output beside its file.
    jobs_table: str | None = None
    # The batch-drop queue: the worker that ends a job asks there for its callback
    # (switchyard.callbacks).
    drop_queue_url: str | None = None
    # Generative models. A streamed request's tokens are written at most this often
    # after its first (each write is one DynamoDB item; a reader sees tokens this
    # much later at worst).
    stream_flush_seconds: float = Field(default=0.05, ge=0, le=5)
    # Their messages are held with this visibility (extended while they run), so the
    # requests of a worker that died are taken up again this soon, not after the
    # queue's visibility timeout.
    generation_visibility_seconds: int = Field(default=10, ge=3, le=300)
    # Every other model's messages are held with this visibility, at most the
    # queue's own (extended every third of it while they wait or run): the requests
    # of a worker that died are taken up again this soon, well inside a sync
    # request's grace (``sync_grace_seconds``), rather than after the queue's
    # visibility timeout, after which they would mostly be expired.
    held_visibility_seconds: int = Field(default=15, ge=3, le=300)


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
        problems = "; ".join(
            f"{ENV_PREFIX}{str(err['loc'][0]).upper()}: {err['msg']}"
            + (f" (at {'.'.join(str(p) for p in err['loc'][1:])})" if len(err["loc"]) > 1 else "")
            for err in exc.errors()
        )
        raise SettingsError(f"invalid platform settings: {problems}") from None
