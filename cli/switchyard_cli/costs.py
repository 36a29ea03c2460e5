"""``switchyard costs``: what the platform spent, per tenant, model or version, with
the workers' shares and the AWS requests' apart, and the workers' idle time apart
as the platform's overhead (billed to no tenant). The numbers are the ones the
workers add up in the results table (``switchyard.costs.CostLedger``), read the
same way from the local platform's emulator and from a deployed stage."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from switchyard.costs import CostLedger, cost_report
from switchyard.schemas import AWS_SERVICES
from switchyard_cli.arguments import duration
from switchyard_cli.targets import target_of

ABOUT = (
    "what requests cost, per tenant, model or version (--by): requests, USD, the workers' "
    "share (their time in the model, per input, priced at the service's instance type) and "
    "the AWS requests' (API Gateway, Lambda, SQS, DynamoDB, S3, Firehose); then the workers' "
    "running, busy and idle time, idle being the platform's overhead, billed to no tenant "
    "(docs/costs.md). Counted by the hour (UTC)"
)


def add_command(commands: Any) -> None:
    """The ``costs`` command."""
    costs = commands.add_parser("costs", help=ABOUT, description=ABOUT)
    costs.add_argument(
        "--by", choices=["tenant", "model", "version"], default="tenant", help="group by"
    )
    costs.add_argument(
        "--since",
        type=duration,
        default=duration("24h"),
        metavar="SPAN",
        help="from the hour this long ago on (e.g. 30m, 1h, 7d; default 24h); whole hours",
    )
    costs.add_argument("--json", action="store_true", help="JSON, for machines")
    costs.set_defaults(func=_costs)


def _costs(args: argparse.Namespace) -> int:
    target = target_of(args)
    manifest = target.manifest
    ledger = CostLedger(target.client("dynamodb"), target.adapters.settings.results_table)
    since = time.time() - args.since
    spend = ledger.spend(manifest.tenants, manifest.models, since)
    times = ledger.worker_time(manifest.services(), since)
    report = cost_report(spend, times, args.by)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def format_report(report: dict[str, Any]) -> str:
    """The report as a table per group, then the workers' time."""
    by = report["by"]
    head = f"{by:<28} {'requests':>9} {'usd':>12} {'worker usd':>12} {'aws usd':>12}"
    lines = [head, *(_row(name, g) for name, g in report["groups"].items())]
    lines.append(_row("total", report["total"]))
    aws = report["total"]["aws"]
    lines.append("aws by service: " + ", ".join(f"{s} {aws.get(s, 0.0):.6f}" for s in AWS_SERVICES))
    w = report["workers"]
    lines += [
        "",
        f"{'worker service':<28} {'running s':>10} {'busy s':>10} {'idle s':>10} "
        f"{'running usd':>12} {'idle usd':>12}",
    ]
    for name, s in w["services"].items():
        lines.append(
            f"{name:<28} {s['running_seconds']:>10.1f} {s['busy_seconds']:>10.1f} "
            f"{s['idle_seconds']:>10.1f} {s['running_usd']:>12.6f} {s['idle_usd']:>12.6f}"
        )
    lines.append(
        f"idle (platform overhead, billed to no tenant): {w['idle_seconds']:.1f} s, "
        f"${w['idle_usd']:.6f}; busy {w['busy_seconds']:.1f} s, billed to requests "
        f"{w['billed_seconds']:.1f} s"
    )
    return "\n".join(lines)


def _row(name: str, g: dict[str, Any]) -> str:
    return (
        f"{name:<28} {g['requests']:>9} {g['usd']:>12.6f} {g['worker_usd']:>12.6f} "
        f"{g['aws_usd']:>12.6f}"
    )
