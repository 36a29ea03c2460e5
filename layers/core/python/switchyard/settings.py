"""Runtime settings, parsed once from the environment at cold start.

The router function, the workers and the local platform read the same variables
(prefix ``SWITCHYARD_``). In the cloud the CDK app sets them; locally the
supervisor does. A missing or malformed variable fails at start-up with a message
that names it, never later on a request.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict


class QueuePair(BaseSettings):
    realtime: str
    batch: str


class Settings(BaseSettings):
    """What a process of the platform needs to find its resources."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", extra="ignore", frozen=True)

    stage: str = "dev"
    region: str = "us-east-1"
    # Set only on the local platform: the emulator's address. Unset in the cloud.
    aws_endpoint_url: str | None = None

    registry_table: str
    results_table: str
    jobs_table: str = ""
    payloads_bucket: str
    # Model name -> queue URLs. A router function in the cloud serves one model;
    # the local router serves every model in the manifest.
    queues: dict[str, QueuePair]

    result_ttl_seconds: int = Field(default=86_400, gt=0)
    # Inputs over this travel in S3 and the queue message carries their key (SQS
    # messages hold 256 KB).
    claim_check_bytes: int = Field(default=200_000, gt=0)
    # Outputs over this are stored in S3 and the result item carries their key
    # (manifest.toml, [platform]).
    result_inline_bytes: int = Field(default=8_192, gt=0, le=350_000)
    max_body_bytes: int = Field(default=1_048_576, gt=0)

    # Where routing documents come from: the AppConfig Lambda extension in the
    # cloud, the emulator's hosted configuration versions locally.
    routing_source: Literal["appconfig-extension", "hosted-versions", "none"] = "none"
    appconfig_application: str = ""
    appconfig_environment: str = ""
    routing_cache_seconds: float = Field(default=5.0, ge=0)

    # API keys are resolved to tenants through API Gateway's own key store.
    api_key_cache_seconds: float = Field(default=30.0, ge=0)

    # The queues' visibility timeout; workers extend held messages before it ends.
    visibility_timeout_seconds: int = Field(default=60, ge=10)


class WorkerSettings(Settings):
    """A worker serves every version of one model."""

    worker_model: str
    artifacts_bucket: str = ""
    artifacts_cache: str = "/tmp/switchyard-artifacts"
    # An idle worker's long poll: longer polls cost fewer SQS requests an hour; a
    # SIGTERM waits for the poll in progress (well inside ECS's stop timeout).
    poll_wait_seconds: int = Field(default=10, ge=0, le=20)
    # Touched once the worker has loaded its versions and polls (local supervisor).
    ready_file: str | None = None
    prediction_log_stream: str | None = None


class SettingsError(RuntimeError):
    pass


@lru_cache(maxsize=2)
def get_settings(kind: type[Settings] = Settings) -> Settings:
    """Parse the environment once; a bad variable stops the process with its name."""
    try:
        return kind()  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = "; ".join(
            f"SWITCHYARD_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid platform settings: {problems}") from None
