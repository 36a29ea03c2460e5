"""``switchyard plan PROFILE.toml``: a capacity plan for a traffic profile, printed
(or ``--json``). The arithmetic, the prices and the replay through the scaling rule
are the core's (``switchyard.planning``); this module reads the arguments and lays
the plan out. It needs no platform and no AWS account: only the profile and the
manifest."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from switchyard.planning import HOURS_PER_MONTH, Plan, ServicePlan, plan_file
from switchyard.prices import PRICES_AS_OF
from switchyard.scaling_replay import WaitDistribution
from switchyard.traffic_profile import ProfileError
from switchyard_cli.arguments import count
from switchyard_cli.targets import CommandError, manifest_of

ABOUT = (
    "a capacity plan for a traffic profile (docs/profiles/*.toml, docs/capacity.md): per "
    "worker service its workers (at the peak, min, max), instance type and vCPUs; per model "
    "its router's reserved concurrency and its queue; the account quotas to raise; $ a month "
    "by service; and the profile's day replayed through the scaling rule (switchyard.scaling."
    "decide): p99 queue wait, worker-hours, idle worker-hours and their cost. Reads the "
    "manifest for the models it names (compute, batch size, pool, scaling); needs no platform"
)


def add_command(commands: Any) -> None:
    """The ``plan`` command."""
    plan = commands.add_parser("plan", help=ABOUT, description=ABOUT)
    plan.add_argument("profile_file", metavar="PROFILE.toml", help="the traffic profile")
    plan.add_argument(
        "--manifest",
        default=argparse.SUPPRESS,
        help="the manifest whose models, pools and scaling the plan reads (default: the "
        "repository's manifest.toml, or SWITCHYARD_MANIFEST)",
    )
    plan.add_argument(
        "--rows",
        type=count(minimum=1),
        help="show the N busiest services and models in the tables and sum the rest in one "
        "row (default: all)",
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON, for machines")
    plan.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    manifest = manifest_of(args)
    try:
        plan = plan_file(args.profile_file, manifest)
    except ProfileError as exc:
        raise CommandError(str(exc)) from None
    print(json.dumps(plan.as_dict(), indent=2) if args.json else format_plan(plan, args.rows))
    return 0


def format_plan(plan: Plan, rows: int | None = None) -> str:
    """The plan as a reader reads it: workers, routers and queues, the replayed day,
    quotas, cost, notes. ``rows``: the tables show that many services and models,
    the busiest first, and sum the rest in one row."""
    out = [f"Capacity plan: {plan.profile} (stage {plan.stage}, headroom {plan.headroom:.0%})"]
    if plan.description:
        out.append(plan.description)
    services = sorted(plan.services, key=lambda s: -s.peak_rps)
    shown, rest = services[:rows], services[rows:] if rows is not None else []

    out += ["", "Workers, per service (a model's own, or a pool's)"]
    table = [
        (
            s.service,
            str(len(s.models)),
            s.instance_type,
            _n(s.peak_rps),
            _n(s.worker_rps),
            str(s.needed_at_peak),
            str(s.min_workers),
            str(s.max_workers),
            _n(s.max_workers * s.vcpus_per_worker),
        )
        for s in shown
    ]
    for label, group in ((f"({len(rest)} more)", rest), ("all", services)):
        if group:
            table.append(
                (
                    label,
                    str(sum(len(s.models) for s in group)),
                    "",
                    _n(sum(s.peak_rps for s in group)),
                    "",
                    str(sum(s.needed_at_peak for s in group)),
                    str(sum(s.min_workers for s in group)),
                    str(sum(s.max_workers for s in group)),
                    _n(sum(s.max_workers * s.vcpus_per_worker for s in group)),
                )
            )
    out += _table(
        ("service", "models", "instance", "peak req/s", "req/s a worker", "at peak", "min",
         "max", "vCPUs at max"),
        table,
    )  # fmt: skip
    differs = [s for s in services if s.manifest_max_tasks not in (None, s.max_workers)]
    if differs:
        out.append(
            f"  the manifest's max_tasks in {plan.stage} now: "
            + ", ".join(f"{s.service} {s.manifest_max_tasks}" for s in differs)
        )

    models = sorted(plan.models, key=lambda m: -m.peak_rps)
    more = models[rows:] if rows is not None else []
    table = [
        (
            m.model,
            _n(m.peak_rps),
            _n(m.mean_rps),
            f"{m.router_ms:.0f}",
            _n(m.reserved_concurrency),
            f"{m.messages_per_batch} ({m.batch_fill:.1f})",
            _ms(m.batch_seconds),
            f"{m.backlog_per_task} ({_seconds(m.backlog_seconds)})",
            _n(m.in_flight_at_max),
        )
        for m in models[:rows]
    ]
    if more:
        table.append(
            (
                f"({len(more)} more)",
                _n(sum(m.peak_rps for m in more)),
                _n(sum(m.mean_rps for m in more)),
                "",
                _n(sum(m.reserved_concurrency for m in more)),
                "",
                "",
                "",
                _n(max(m.in_flight_at_max for m in more)),
            )
        )
    out += ["", "Routers and queues, per model"]
    out += _table(
        ("model", "peak req/s", "mean req/s", "router ms", "reserved concurrency",
         "msgs a batch (at mean)", "batch ms", "backlog_per_task (a worker's)",
         "in flight at max"),
        table,
    )  # fmt: skip

    out += [
        "",
        "The day replayed through switchyard.scaling.decide (a day after one like it; and "
        "the first day, from the minimum)",
    ]
    table = [_replay_row(s.service, [s]) for s in shown]
    if rest:
        table.append(_replay_row(f"({len(rest)} more)", rest))
    out += _table(
        ("service", "p99 wait", "max wait", "worker-h/day", "idle-h/day", "peak workers",
         "wakes/outs/ins", "first day: p99 wait", "max wait"),
        table,
    )  # fmt: skip
    hours, idle = plan.worker_hours_per_day, plan.idle_hours_per_day
    sim = plan.simulation
    out += [
        f"  all: p99 queue wait {_seconds(plan.waits.quantile(0.99))} (by requests), max "
        f"{_seconds(plan.waits.maximum())}; first day from the minimum: p99 "
        f"{_seconds(plan.first_day_waits.quantile(0.99))}, max "
        f"{_seconds(plan.first_day_waits.maximum())}",
        f"  worker-hours {hours:,.1f} a day, {idle:,.1f} of them idle ({_share(idle, hours)}): "
        f"${plan.idle_usd_per_month:,.0f} a month idle",
        f"  ({sim.tick_seconds:g} s ticks, {sim.arrivals} arrivals, a decision every "
        f"{sim.decide_every_seconds:g} s; a worker serves {_start_delays(plan)} after the "
        "decision to start it)",
    ]

    out += [
        "",
        "Account quotas (against a new account's, or the profile's [account]; RAISE: it needs "
        "more; check: set per account)",
    ]
    for quota in plan.quotas:
        mark = "check" if quota.default is None else "RAISE" if quota.to_raise else "ok"
        code = f" ({quota.code})" if quota.code else ""
        has = "set per account" if quota.default is None else f"has {quota.default:,}"
        out.append(f"  {mark:<5} {quota.name}{code}: needs {quota.needs:,}, {has}")
        out.append(f"        {quota.why}")

    total = plan.total_usd_per_month
    out += [
        "",
        f"Cost, $ a month ({HOURS_PER_MONTH} h at the mean rate; us-east-1 list prices of "
        f"{PRICES_AS_OF}, free tiers ignored)",
    ]
    width = max(len(k) for k in plan.usd_per_month)
    for service, usd in plan.usd_per_month.items():
        out.append(f"  {service:<{width}}  {usd:>14,.0f}  {_share(usd, total):>5}")
    out.append(f"  {'total':<{width}}  {total:>14,.0f}")
    requests = plan.monthly["requests"]
    if requests:
        out.append(
            f"  per million requests: ${total / requests * 1e6:,.2f} "
            f"({requests / 1e9:,.1f} billion requests a month)"
        )
    if plan.notes:
        out += ["", "Notes"]
        out += [f"  - {note}" for note in plan.notes]
    return "\n".join(out)


def _replay_row(label: str, group: Sequence[ServicePlan]) -> tuple[str, ...]:
    steady = WaitDistribution.merged(s.replay.waits for s in group)
    first = WaitDistribution.merged(s.first_day.waits for s in group)
    return (
        label,
        _seconds(steady.quantile(0.99)),
        _seconds(steady.maximum()),
        f"{sum(s.replay.worker_hours for s in group):,.1f}",
        f"{sum(s.replay.idle_hours for s in group):,.1f}",
        str(sum(s.replay.peak_workers for s in group)),
        "/".join(
            str(sum(getattr(s.replay, n) for s in group))
            for n in ("wakes", "scale_outs", "scale_ins")
        ),
        _seconds(first.quantile(0.99)),
        _seconds(first.maximum()),
    )


def _start_delays(plan: Plan) -> str:
    delays = {s.start_delay_seconds for s in plan.services}
    if len(delays) == 1:
        return _seconds(delays.pop())
    return ", ".join(f"{s.service} {_seconds(s.start_delay_seconds)}" for s in plan.services)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns aligned: the first to the left, the others to the right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  " + "  ".join(cells).rstrip()

    return [line(header), *(line(row) for row in rows)]


def _n(value: float) -> str:
    """A count or a rate: whole above 100, one decimal under."""
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.1f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:,.1f} min"
    return f"{value:,.1f} s" if value >= 1 or value == 0 else f"{value * 1000:,.0f} ms"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"
