"""Tenants' budgets kept in the results table (DynamoDBBudgetStore), on the emulator:
spend added by any number of workers, a budget raised by the operator's command and
seen by every router at once, and nothing of it read as a request."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from switchyard.budgets import Budgets, DynamoDBBudgetStore, OverBudget, TenantBudget, month_of
from switchyard.results import DynamoDBResultStore


@pytest.fixture
def table(manifest, provisioned):
    return manifest.names("dev").results_table


def test_spend_added_by_many_writers_is_summed_per_tenant_and_month(clients, table):
    store = DynamoDBBudgetStore(clients("dynamodb"), table)
    # WHEN eight workers add their batches' costs at once
    with ThreadPoolExecutor(8) as pool:
        for _ in range(40):
            pool.submit(store.add_spend, {"acme": 0.25, "globex": 0.125}, "2031-01")
    store.add_spend({"acme": 1.0}, "2031-02")
    store.add_spend({"acme": 0.0, "globex": -1.0}, "2031-02")  # nothing to add
    # THEN each tenant's month holds the sum, and another month its own
    assert store.read("acme", "2031-01") == (pytest.approx(10.0), None)
    assert store.read("globex", "2031-01") == (pytest.approx(5.0), None)
    assert store.read("acme", "2031-02") == (pytest.approx(1.0), None)
    assert store.read("globex", "2031-02") == (0.0, None)
    # AND none of it is a request of the tenant's
    results = DynamoDBResultStore(clients("dynamodb"), table, None, 8_192)
    assert results.get("acme", "budget#spend#2031-01") is None


def test_a_budget_set_by_the_operator_is_seen_by_every_router(clients, table):
    month = month_of(time.time())
    store = DynamoDBBudgetStore(clients("dynamodb"), table)
    store.add_spend({"globex": 2.0}, month)
    given = {"globex": TenantBudget(monthly_usd=1.0)}
    routers = [Budgets(DynamoDBBudgetStore(clients("dynamodb"), table), given) for _ in range(2)]
    for router in routers:
        with pytest.raises(OverBudget):
            router.lane_for("globex", "realtime")
    store.set_budget("globex", 3.0)
    assert [r.lane_for("globex", "realtime") for r in routers] == ["realtime", "realtime"]
    assert routers[0].state("globex").raised
    store.set_budget("globex", None)
    assert routers[1].state("globex").budget_usd == 1.0


def test_the_budget_command_shows_raises_and_resets_a_tenants_budget(cli, clients, table):
    month = month_of(time.time())
    DynamoDBBudgetStore(clients("dynamodb"), table).add_spend({"globex": 450.0}, month)
    # GIVEN globex at 90 % of the manifest's 500
    code, out, _ = cli("budget", "show", "--json")
    assert code == 0
    shown = {b["tenant"]: b for b in json.loads(out)["budgets"]}
    assert set(shown) == {"acme", "globex"}
    assert shown["globex"]["spent_usd"] == pytest.approx(450.0)
    assert (shown["globex"]["budget_usd"], shown["globex"]["warn"]) == (500.0, True)
    assert not shown["globex"]["over"] and not shown["acme"]["warn"]
    code, out, _ = cli("budget", "show")
    assert "globex" in out and "WARN" in out
    # WHEN the operator raises it
    code, out, _ = cli("budget", "set", "globex", "1000")
    assert code == 0 and "$1000.00 a month" in out
    shown = {b["tenant"]: b for b in json.loads(cli("budget", "show", "--json")[1])["budgets"]}
    assert (shown["globex"]["budget_usd"], shown["globex"]["raised"]) == (1000.0, True)
    assert not shown["globex"]["warn"]
    # AND resets it
    assert cli("budget", "reset", "globex")[0] == 0
    shown = {b["tenant"]: b for b in json.loads(cli("budget", "show", "--json")[1])["budgets"]}
    assert (shown["globex"]["budget_usd"], shown["globex"]["raised"]) == (500.0, False)


def test_the_budget_command_refuses_a_tenant_it_cannot_raise(cli):
    code, _, err = cli("budget", "set", "initech", "10")
    assert code == 2 and "no tenant 'initech'" in err


@pytest.mark.parametrize(("usd", "said"), [("-3", "0 dollars or more"), ("lots", "not a number")])
def test_the_budget_command_refuses_a_budget_that_is_no_amount(cli, capsys, usd, said):
    with pytest.raises(SystemExit) as refused:
        cli("budget", "set", "globex", usd)
    assert refused.value.code == 2 and said in capsys.readouterr().err
