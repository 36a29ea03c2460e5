"""Where the operator's commands act: the running local platform (its
``.run/platform.json``) or a deployed stage (``--aws``), as one :class:`Target`
that every command group (``switchyard``'s own, ``switchyard jobs``) builds the
same way."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from switchyard import aws
from switchyard.manifest import Manifest, load_manifest
from switchyard.registry import DynamoDBRegistry
from switchyard.schemas import LANES
from switchyard.settings import Settings
from switchyard.wiring import Adapters, build_adapters
from switchyard_cli.traffic import AppConfigTrafficStore
from switchyard_local.bridge import LocalTrafficStore
from switchyard_local.emulator import process_alive
from switchyard_local.role_policies import act_as_operator
from switchyard_local.routing_changes import TrafficStore


@dataclass
class Target:
    """Where the commands act: the local platform's emulator or a deployed stack."""

    manifest: Manifest
    adapters: Adapters
    artifacts_bucket: str
    # Made when a command first needs it: finding the routing application is a call
    # of its own, which commands that never route (dlq, models) do not make.
    open_traffic: Callable[[], TrafficStore]
    drop_bucket: str = ""
    jobs_table: str = ""
    drop_queue: str = ""  # where an ended job's callback is asked for
    webhook_secret_prefix: str = ""
    default_tenant: str | None = None  # the local platform's first tenant
    # Each tenant's key for its drops (the local platform's platform.json).
    drop_credentials: dict[str, dict[str, str]] = field(default_factory=dict)

    @cached_property
    def traffic(self) -> TrafficStore:
        return self.open_traffic()

    def client(self, service: str) -> Any:
        return self.adapters.client(service)

    @property
    def registry(self) -> DynamoDBRegistry:
        return self.adapters.registry


class CommandError(Exception):
    """What stops a command, said in words (``switchyard: ...``, exit 2)."""


def manifest_of(args: argparse.Namespace) -> Manifest:
    try:
        return load_manifest(args.manifest)
    except (OSError, ValueError) as exc:  # missing, a folder, not TOML, not a manifest
        raise CommandError(f"--manifest {args.manifest}: {one_line(exc)}") from None


def platform_info(run_dir: str) -> dict[str, Any]:
    """The running local platform's ``platform.json``."""
    path = Path(run_dir) / "platform.json"
    if not path.exists():
        raise CommandError(
            f"no local platform found ({path} is missing): run `make up`, or pass --aws"
        )
    try:
        info = json.loads(path.read_text())
        info["settings"], info["names"]  # noqa: B018 - what every command reads
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(
            f"{path} is not a platform's record ({one_line(exc)}): run `make up` again"
        ) from None
    pid = info.get("pid")
    if isinstance(pid, int) and not process_alive(pid):
        raise CommandError(
            f"the local platform recorded in {path} (pid {pid}) is no longer "
            "running: start it with `make up`"
        )
    return info


def one_line(exc: BaseException) -> str:
    return first_line(str(exc)) or type(exc).__name__


def first_line(text: str) -> str:
    """What fits a line of a message or a table: the first (the rest is elsewhere:
    a log, or a command's --json)."""
    lines = text.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def target_of(args: argparse.Namespace) -> Target:
    manifest = manifest_of(args)
    if args.aws:
        return aws_target(args, manifest)
    info = platform_info(args.run_dir)
    act_as_operator(info)
    adapters = build_adapters(Settings(**info["settings"]))
    return Target(
        manifest=manifest,
        adapters=adapters,
        artifacts_bucket=info["names"]["artifacts_bucket"],
        open_traffic=lambda: LocalTrafficStore(
            adapters.client("appconfig"), info["names"]["appconfig_application_id"]
        ),
        drop_bucket=info["names"]["batch_drop_bucket"],
        jobs_table=info["names"]["jobs_table"],
        drop_queue=info["names"]["drop_queue_url"],
        webhook_secret_prefix=info["names"]["webhook_secret_prefix"],
        default_tenant=info.get("default_tenant"),
        drop_credentials=info.get("drop_credentials", {}),
    )


def aws_region(args: argparse.Namespace, manifest: Manifest) -> str:
    """The deployed stage's region (``--region``, ``AWS_REGION``, the manifest's),
    with ``--profile`` in force for the clients made after."""
    if args.profile:
        os.environ["AWS_PROFILE"] = args.profile
    return str(args.region or os.environ.get("AWS_REGION") or manifest.platform.region)


def aws_target(args: argparse.Namespace, manifest: Manifest) -> Target:
    region = aws_region(args, manifest)
    names = manifest.names(args.stage)
    account = aws.client("sts", region).get_caller_identity()["Account"]
    stage = manifest.stages[args.stage]

    def queue_url(name: str) -> str:
        return f"https://sqs.{region}.amazonaws.com/{account}/{name}"

    queues = {
        model: {lane: queue_url(names.queue(model, lane)) for lane in LANES}
        for model in manifest.models
    }
    settings = Settings(
        **manifest.settings_values(args.stage),
        region=region,
        registry_table=names.registry_table,
        results_table=names.results_table,
        payloads_bucket=names.cloud_bucket(names.payloads_bucket, account, region),
        queues=queues,
    )
    return Target(
        manifest=manifest,
        adapters=build_adapters(settings),
        artifacts_bucket=names.cloud_bucket(names.artifacts_bucket, account, region),
        open_traffic=lambda: AppConfigTrafficStore(
            aws.client("appconfig", region),
            names.appconfig_application,
            names.deployment_strategy(stage.config_deployment),
        ),
        drop_bucket=names.cloud_bucket(names.batch_drop_bucket, account, region),
        jobs_table=names.jobs_table,
        drop_queue=queue_url(names.batch_drop_queue),
        webhook_secret_prefix=names.webhook_secret_prefix,
    )
