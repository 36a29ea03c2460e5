"""Tenants' monthly budgets (switchyard.budgets): the rule a router applies before it
queues a tenant's work, on an in-memory store and a hand-moved clock."""

from __future__ import annotations

import calendar
import time

import pytest
from pydantic import ValidationError

from harness.fakes import FakeCostLedger
from stacks.assets import MANIFEST_FILE
from switchyard.budgets import (
    Budgets,
    BudgetState,
    InMemoryBudgetStore,
    OverBudget,
    TenantBudget,
    month_of,
    next_month_starts,
)
from switchyard.manifest import Tenant, load_manifest
from switchyard_cli.status import format_budget_flags
from switchyard_worker.costing import CostKeeper
from tests.unit.test_costs import RATES, answer, message

NOV_27 = float(calendar.timegm((2026, 11, 27, 12, 0, 0)))
DEC_1 = float(calendar.timegm((2026, 12, 1, 0, 0, 0)))


class Clock:
    def __init__(self, now: float = NOV_27) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def budgets(
    store: InMemoryBudgetStore, clock: Clock, seen: list[BudgetState] | None = None
) -> Budgets:
    given = {
        "globex": TenantBudget(monthly_usd=10.0),
        "acme": TenantBudget(monthly_usd=10.0, over_budget="batch"),
    }
    on_state = seen.append if seen is not None else None
    return Budgets(store, given, remember_seconds=5.0, clock=clock, on_state=on_state)


def test_months_are_calendar_months_in_utc():
    assert month_of(NOV_27) == "2026-11"
    assert month_of(DEC_1 - 1) == "2026-11"
    assert month_of(DEC_1) == "2026-12"
    assert next_month_starts(NOV_27) == DEC_1
    december = float(calendar.timegm((2026, 12, 31, 23, 0, 0)))
    assert next_month_starts(december) == calendar.timegm((2027, 1, 1, 0, 0, 0))


def test_under_budget_work_goes_as_asked_and_over_it_is_refused_until_the_month_ends():
    store, clock = InMemoryBudgetStore(), Clock()
    gate = budgets(store, clock)
    store.add_spend({"globex": 9.99}, "2026-11")
    assert gate.lane_for("globex", "realtime") == "realtime"
    # WHEN its spend reaches the budget (and the router's memory of "under" runs out)
    store.add_spend({"globex": 0.01}, "2026-11")
    clock.now += 6
    # THEN its new work is refused, with a Retry-After up to the next month
    with pytest.raises(OverBudget) as refused:
        gate.lane_for("globex", "realtime")
    assert refused.value.code == "budget_exceeded"
    assert refused.value.retry_after_seconds == int(DEC_1 - clock.now)
    assert "globex" in str(refused.value) and "2026-11" in str(refused.value)
    # AND in the next month its spend starts again from nothing
    clock.now = DEC_1
    assert gate.lane_for("globex", "realtime") == "realtime"


def test_an_under_verdict_is_remembered_briefly_a_refusal_never():
    store, clock = InMemoryBudgetStore(), Clock()
    seen: list[BudgetState] = []
    gate = budgets(store, clock, seen)
    gate.lane_for("globex", "realtime")
    store.add_spend({"globex": 50.0}, "2026-11")
    # within the remembered seconds the router does not read again
    assert gate.lane_for("globex", "realtime") == "realtime"
    assert len(seen) == 1
    clock.now += 5
    with pytest.raises(OverBudget):
        gate.lane_for("globex", "realtime")
    # WHEN an operator raises the budget
    store.set_budget("globex", 100.0)
    # THEN the very next request goes through: a refusal is not remembered
    assert gate.lane_for("globex", "realtime") == "realtime"
    assert [s.over for s in seen] == [False, True, False]
    assert seen[-1].raised and seen[-1].budget_usd == 100.0
    # AND reset, the manifest's budget stands again
    store.set_budget("globex", None)
    clock.now += 5
    with pytest.raises(OverBudget):
        gate.lane_for("globex", "realtime")


def test_over_budget_batch_moves_realtime_work_to_the_batch_lane_and_keeps_jobs():
    store, clock = InMemoryBudgetStore(), Clock()
    gate = budgets(store, clock)
    store.add_spend({"acme": 12.0}, "2026-11")
    assert gate.lane_for("acme", "realtime") == "batch"
    assert gate.lane_for("acme", "batch") == "batch"
    gate.admit_job("acme")  # a job is batch work: it runs
    with pytest.raises(OverBudget):
        gate.admit_stream("acme")  # a stream has no batch lane


def test_a_refusing_tenant_over_budget_submits_no_job_and_opens_no_stream():
    store, clock = InMemoryBudgetStore(), Clock()
    gate = budgets(store, clock)
    gate.admit_job("globex")
    gate.admit_stream("globex")
    store.add_spend({"globex": 10.0}, "2026-11")
    clock.now += 5
    with pytest.raises(OverBudget):
        gate.admit_job("globex")
    with pytest.raises(OverBudget):
        gate.admit_stream("globex")


def test_a_tenant_without_a_budget_is_never_read():
    store, clock = InMemoryBudgetStore(), Clock()
    seen: list[BudgetState] = []
    gate = budgets(store, clock, seen)
    store.add_spend({"initech": 1e9}, "2026-11")
    assert gate.lane_for("initech", "realtime") == "realtime"
    gate.admit_job("initech")
    gate.admit_stream("initech")
    assert seen == []


@pytest.mark.parametrize(
    ("spent", "budget", "used", "warn", "over"),
    [
        (0.0, 10.0, 0.0, False, False),
        (7.99, 10.0, 0.799, False, False),
        (8.0, 10.0, 0.8, True, False),
        (10.0, 10.0, 1.0, True, True),
        (0.0, 0.0, float("inf"), True, True),  # a budget of 0: nothing may be spent
        (3.0, None, None, False, False),
    ],
)
def test_the_warning_is_at_four_fifths_and_the_refusal_at_the_whole(
    spent, budget, used, warn, over
):
    state = BudgetState("globex", "2026-11", spent, budget)
    assert state.used == (pytest.approx(used) if used is not None else None)
    assert (state.warn, state.over) == (warn, over)
    assert state.as_dict()["warn"] is warn and state.as_dict()["over"] is over


def test_the_manifest_refuses_over_budget_without_a_budget_and_a_negative_budget():
    with pytest.raises(ValidationError, match="over_budget needs monthly_budget_usd"):
        Tenant(tier="standard", over_budget="batch")
    with pytest.raises(ValidationError, match="monthly_budget_usd"):
        Tenant(tier="standard", monthly_budget_usd=-1)
    assert Tenant(tier="standard", monthly_budget_usd=0).over_budget == "refuse"


def test_only_budgeted_tenants_reach_the_routers_settings():
    manifest = load_manifest(MANIFEST_FILE)
    values = manifest.router_settings_values()["tenant_budgets"]
    assert set(values) == set(manifest.budgeted_tenants())
    for tenant, budget in values.items():
        assert TenantBudget(**budget).monthly_usd == manifest.tenants[tenant].monthly_budget_usd
    unbudgeted = manifest.model_copy(
        update={
            "tenants": {
                name: t.model_copy(update={"monthly_budget_usd": None, "over_budget": "refuse"})
                for name, t in manifest.tenants.items()
            }
        }
    )
    assert unbudgeted.budgeted_tenants() == []
    assert unbudgeted.router_settings_values()["tenant_budgets"] == {}


class FailingOnce(InMemoryBudgetStore):
    """A budget store whose first write fails (DynamoDB out of reach for a turn)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def add_spend(self, spent, month):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise ConnectionError("unreachable")
        super().add_spend(spent, month)


def test_a_workers_stored_answers_count_towards_their_tenants_months():
    # GIVEN a worker's cost keeper whose first count of the month's spend fails
    store = FailingOnce()
    keeper = CostKeeper(
        rates=RATES,
        ledger=FakeCostLedger(),  # type: ignore[arg-type]
        service="m",
        worker_id="w1",
        inline_bytes=400_000,
        meter_seconds=60,
        emit=False,
        budgets=store,
    )
    month = month_of(time.time())
    spent = 0.0
    for turn in range(2):
        # WHEN a batch of both tenants' answers is stored, and the keeper writes
        ms = [message(f"r{turn}-{i}", "acme" if i % 2 else "globex") for i in range(4)]
        answers = [(m, answer(m, 20.0)) for m in ms]
        keeper.price(answers)
        spent += sum(r.cost.usd for _, r in answers if r.cost is not None)
        keeper.spent([r for _, r in answers])
        keeper.write()
    # THEN each tenant's month holds what its answers cost, the failed turn's included
    assert store.failed
    counted = store.spend[("acme", month)] + store.spend[("globex", month)]
    assert spent > 0 and counted == pytest.approx(spent)
    assert store.spend[("acme", month)] == pytest.approx(spent / 2)


def test_the_status_flags_a_tenant_from_four_fifths_of_its_budget():
    states = [
        BudgetState("acme", "2026-11", 1.0, 10.0).as_dict(),
        BudgetState("globex", "2026-11", 8.5, 10.0).as_dict(),
        BudgetState("initech", "2026-11", 0.0, 0.0).as_dict(),
    ]
    lines = format_budget_flags(states)
    assert lines[1].startswith("budgets, 2026-11")
    acme, globex, initech = lines[2:]
    assert "10.0 %" in acme and "WARN" not in acme and "OVER" not in acme
    assert "85.0 %" in globex and "WARN" in globex
    assert "all" in initech and "OVER" in initech
    assert format_budget_flags([]) == []
