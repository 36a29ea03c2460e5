"""``switchyard budget``: tenants' monthly budgets, read and raised without a deploy.

``show`` lists each budgeted tenant's month: spent, budget, the share used, and
whether it is past the warning (80 %) or over; ``set TENANT USD`` raises (or lowers)
a tenant's budget, at once for every router; ``reset TENANT`` gives it the
manifest's again. The rule and the store are the core's (``switchyard.budgets``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from switchyard.budgets import Budgets, BudgetState, DynamoDBBudgetStore, TenantBudget
from switchyard.manifest import Manifest
from switchyard_cli.targets import CommandError, Target, target_of

ABOUT = (
    "tenants' monthly budgets (the manifest's monthly_budget_usd): what each has spent this "
    "month (UTC) against its budget; at 80 percent an alarm, at 100 percent its new work "
    'is refused (429 budget_exceeded) or moved to the batch lane (over_budget = "batch")'
)


def add_command(commands: Any) -> None:
    """The ``budget`` command group."""
    budget = commands.add_parser("budget", help=ABOUT, description=ABOUT).add_subparsers(
        dest="sub", required=True
    )
    show = budget.add_parser("show", help="each budgeted tenant's month: spent, budget, used")
    show.add_argument("--json", action="store_true", help="JSON, for machines")
    show.set_defaults(func=_show)
    about = (
        "raise (or lower) a tenant's monthly budget, for every router at once and until "
        "`switchyard budget reset`: the request after a raise goes through"
    )
    set_ = budget.add_parser("set", help=about, description=about)
    set_.add_argument("tenant")
    set_.add_argument("usd", type=_usd, metavar="USD", help="the month's budget, in USD")
    set_.set_defaults(func=_set)
    about = "give a tenant the manifest's budget again"
    reset = budget.add_parser("reset", help=about, description=about)
    reset.add_argument("tenant")
    reset.set_defaults(func=_reset)


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dollars") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a budget is 0 dollars or more")
    return value


def budgets_of(manifest: Manifest) -> dict[str, TenantBudget]:
    """The manifest's budgets, as a router holds them."""
    return {
        name: TenantBudget(monthly_usd=t.monthly_budget_usd, over_budget=t.over_budget)
        for name, t in manifest.tenants.items()
        if t.monthly_budget_usd is not None
    }


def _budgets(target: Target) -> tuple[Budgets, DynamoDBBudgetStore]:
    store = DynamoDBBudgetStore(target.client("dynamodb"), target.adapters.settings.results_table)
    return Budgets(store, budgets_of(target.manifest)), store


def budget_states(target: Target) -> list[BudgetState]:
    """Each budgeted tenant's month, read now."""
    budgets, _ = _budgets(target)
    return [budgets.state(tenant) for tenant in target.manifest.budgeted_tenants()]


def _budgeted(target: Target, tenant: str) -> None:
    if tenant not in target.manifest.tenants:
        known = ", ".join(sorted(target.manifest.tenants))
        raise CommandError(f"no tenant {tenant!r} in the manifest (tenants: {known})")
    if tenant not in target.manifest.budgeted_tenants():
        raise CommandError(
            f"tenant {tenant!r} has no budget: give it monthly_budget_usd in the manifest "
            "(and deploy) before raising it"
        )


def _show(args: argparse.Namespace) -> int:
    target = target_of(args)
    states = budget_states(target)
    if args.json:
        print(json.dumps({"budgets": [s.as_dict() for s in states]}, indent=2))
        return 0
    if not states:
        print("no tenant has a budget (monthly_budget_usd in the manifest)")
        return 0
    print(format_budgets(states))
    return 0


def format_budgets(states: list[BudgetState]) -> str:
    """One line per tenant: its month's spend against its budget."""
    lines = []
    for s in states:
        used = s.used
        share = "-" if used is None else ("all" if math.isinf(used) else f"{100 * used:.1f} %")
        flag = (
            "  OVER: new work refused or batched"
            if s.over
            else ("  WARN: over 80 %" if s.warn else "")
        )
        raised = " (raised)" if s.raised else ""
        lines.append(
            f"{s.tenant:<12} {s.month}  spent ${s.spent_usd:.4f} of ${s.budget_usd:.2f}"
            f"{raised}  {share}{flag}"
        )
    return "\n".join(lines)


def _set(args: argparse.Namespace) -> int:
    return _change(args, args.usd)


def _reset(args: argparse.Namespace) -> int:
    return _change(args, None)


def _change(args: argparse.Namespace, usd: float | None) -> int:
    target = target_of(args)
    _budgeted(target, args.tenant)
    budgets, store = _budgets(target)
    store.set_budget(args.tenant, usd)
    said = f"${usd:.2f} a month" if usd is not None else "the manifest's again"
    print(f"{args.tenant}'s budget is {said}, from {_now()}")
    print(format_budgets([budgets.state(args.tenant)]))
    return 0


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
