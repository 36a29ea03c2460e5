"""``switchyard jobs``: batch jobs from the command line, on the local platform or a
deployed stack (``--aws``), as an operator with the platform's credentials.

``submit`` uploads a JSON Lines file to the drop bucket under the tenant's prefix
(``<tenant>/<model>/<name>.jsonl``, a multipart upload when large) and records its
job as the jobs API does; the bucket's notification starts the split. The job's
views are ``switchyard.jobs.job_view``'s, the API's own.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from switchyard.aws import transfer
from switchyard.callbacks import JobEvents, cancel, secrets_reader
from switchyard.jobs import TERMINAL, Job, JobRejected, JobStore, job_for_file, job_view
from switchyard.routing import RoutingDocument
from switchyard_cli.arguments import count
from switchyard_cli.targets import target_of
from switchyard_local.routing_changes import TrafficStore

WATCH_EVERY_S = 1.0


class JobsError(Exception):
    """A job command that cannot be done, said in words."""


def add_commands(commands: Any) -> None:
    """The ``jobs`` subcommands (``--aws`` and the rest are the main parser's)."""
    jobs = commands.add_parser("jobs", help="batch jobs").add_subparsers(
        dest="jobs_command", required=True
    )

    def command(name: str, about: str, func: Any) -> argparse.ArgumentParser:
        parser = jobs.add_parser(name, help=about, description=about)
        parser.add_argument("--tenant", help="whose jobs (default: the local platform's first)")
        parser.set_defaults(func=func)
        return parser

    submit = command("submit", "upload a .jsonl file to the drop bucket as a job", _submit)
    submit.add_argument("file", help="one input per line")
    submit.add_argument("--model", required=True, help="the model that answers each line")
    submit.add_argument("--wait", action="store_true", help="follow it until it ends")
    listing = command("list", "the tenant's jobs, newest first", _list)
    listing.add_argument("--limit", type=count(minimum=1), default=20, help="jobs listed")
    listing.add_argument("--json", action="store_true", help="each job as the API shows it")
    job = "the job's id (`jobs list`, or `jobs submit`'s first line)"
    command("show", "a job as the API shows it (JSON)", _show).add_argument("job_id", help=job)
    command("watch", "a job's progress until it ends", _watch).add_argument("job_id", help=job)
    command("cancel", "cancel a job that has not ended", _cancel).add_argument("job_id", help=job)
    command("secret", "the tenant's webhook secret, which signs its jobs' callbacks", _secret)
    fetch = command("fetch", "download a finished job's output", _fetch)
    fetch.add_argument("job_id", help=job)
    fetch.add_argument("-o", "--output", required=True, help="where to write it (.jsonl)")


def _store(args: argparse.Namespace) -> tuple[Any, JobStore, str]:
    target = target_of(args)
    tenant = args.tenant if args.tenant is not None else target.default_tenant
    if tenant is None:
        raise JobsError("--tenant is required with --aws")
    if tenant not in target.manifest.tenants:
        known = ", ".join(target.manifest.tenants)
        raise JobsError(f"unknown tenant {tenant!r} (tenants: {known})")
    return target, JobStore(target.client("dynamodb"), target.jobs_table), tenant


def _job(store: JobStore, tenant: str, job_id: str) -> Job:
    if not job_id:
        raise JobsError("a job id is required")
    job = store.get(tenant, job_id)
    if job is None:
        raise JobsError(f"no job {job_id} for tenant {tenant}")
    return job


def _submit(args: argparse.Namespace) -> int:
    target, store, tenant = _store(args)
    path = Path(args.file)
    if not path.exists():
        raise JobsError(f"{path}: no such file")
    if not path.is_file() or path.suffix != ".jsonl":
        raise JobsError(f"{path}: not a .jsonl file")
    if args.model not in target.manifest.models:
        raise JobsError(f"unknown model {args.model!r} (not in the manifest)")
    key = f"{tenant}/{args.model}/{path.name}"
    s3 = _drop_client(target, tenant)
    transfer(s3).upload_file(str(path), target.drop_bucket, key)
    try:
        job, _ = store.create(
            job_for_file(
                s3,
                target.registry,
                target.manifest.models,
                target.drop_bucket,
                key,
                target.adapters.settings.result_ttl_seconds,
                _DeployedRouting(target.traffic),
            )
        )
    except JobRejected as exc:
        raise JobsError(str(exc)) from None
    # (the same bytes again are the same job, which may have ended already)
    print(f"job {job.job_id} ({job.source}): {job.display_status}")
    return _follow(store, job) if args.wait else 0


def _drop_client(target: Any, tenant: str) -> Any:
    """S3 as the tenant's data team reaches it: with its drop credentials where the
    local platform gave it some (it may put and read under its own prefix only), else
    the operator's."""
    keys = target.drop_credentials.get(tenant)
    if not keys:
        return target.client("s3")
    import boto3

    settings = target.adapters.settings
    return boto3.client(
        "s3", region_name=settings.region, endpoint_url=settings.aws_endpoint_url, **keys
    )


class _DeployedRouting:
    """The routing documents in force, as the traffic commands read them: the job
    runs on its model's stable version, as it would dropped in the bucket."""

    def __init__(self, traffic: TrafficStore) -> None:
        self._traffic = traffic

    def document(self, model: str) -> RoutingDocument | None:
        change = self._traffic.deployed(model)
        return change.document if change is not None else None


def _list(args: argparse.Namespace) -> int:
    _, store, tenant = _store(args)
    jobs, _ = store.list(tenant, limit=args.limit)
    if args.json:
        print(json.dumps([job_view(j) for j in jobs], indent=2))
        return 0
    if not jobs:
        print(f"{tenant}: no jobs")
        return 0
    print(f"{'job id':<24} {'status':<10} {'model':<14} {'lines':>9} {'failed':>7}  source")
    for job in jobs:
        view = job_view(job)
        counts = view["counts"]
        lines = counts["total"] if counts["total"] is not None else f"{counts['read']}+"
        print(
            f"{job.job_id:<24} {view['status']:<10} {job.model:<14} {lines:>9} "
            f"{counts['failed']:>7}  {job.source}"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    _, store, tenant = _store(args)
    print(json.dumps(job_view(_job(store, tenant, args.job_id)), indent=2))
    return 0


def _watch(args: argparse.Namespace) -> int:
    _, store, tenant = _store(args)
    return _follow(store, _job(store, tenant, args.job_id))


def _follow(store: JobStore, job: Job) -> int:
    """A live progress bar until the job ends; 0 if it succeeded."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        # "2,000/2,000 lines answered (3 with an error) succeeded" read as if every
        # line had, when the status followed the count alone
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} lines answered"),
        TextColumn("({task.fields[failed]:,} with an error) · {task.fields[status]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(job.job_id, total=1, status=job.display_status, failed=0)
        while True:
            current = store.get(job.tenant, job.job_id) or job
            view = job_view(current)
            counts = view["counts"]
            bar.update(
                task,
                total=counts["total"] or max(counts["read"], 1),
                completed=counts["done"],
                failed=counts["failed"],
                status=view["status"],
            )
            if view["status"] in TERMINAL:
                break
            time.sleep(WATCH_EVERY_S)
    view = job_view(current)
    counts = view["counts"]
    print(
        f"{current.job_id}: {view['status']}; {counts['done']} lines, {counts['failed']} "
        f"with an error" + (f"; output {current.output_uri}" if current.output_uri else "")
    )
    return 0 if view["status"] == "succeeded" else 1


def _cancel(args: argparse.Namespace) -> int:
    target, store, tenant = _store(args)
    _job(store, tenant, args.job_id)
    events = JobEvents.on_queue(target.client("sqs"), target.drop_queue)
    job = cancel(store, tenant, args.job_id, events)
    assert job is not None
    if job.status != "cancelled":
        raise JobsError(f"job {args.job_id} already ended: {job.display_status}")
    print(f"cancelled {args.job_id}")
    return 0


def _secret(args: argparse.Namespace) -> int:
    """Print the secret to hand to the tenant: its receiver checks each callback's
    ``X-Switchyard-Signature`` with it (``switchyard.callbacks.verify``)."""
    target, _, tenant = _store(args)
    print(secrets_reader(target.client("secretsmanager"), target.webhook_secret_prefix)(tenant))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    output = Path(args.output)
    if not args.output or output.is_dir() or not output.parent.is_dir():
        raise JobsError(f"-o {args.output!r}: not a file in an existing folder")
    target, store, tenant = _store(args)
    job = _job(store, tenant, args.job_id)
    if job.output_uri is None:
        raise JobsError(f"job {args.job_id} has no output ({job.display_status})")
    bucket, key = job.output_uri.removeprefix("s3://").split("/", 1)
    transfer(target.client("s3")).download_file(bucket, key, args.output)
    print(f"{job.output_uri} -> {args.output}")
    return 0
