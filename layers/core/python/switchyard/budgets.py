"""Tenants' monthly budgets: what a tenant has spent this month (UTC) against what it
may spend.

A tenant's budget is its manifest's ``monthly_budget_usd``, unless an operator has
raised (or lowered) it since with ``switchyard budget set``: that figure is kept in
the results table and stands over the manifest's until it is cleared. What a tenant
has spent is a counter per tenant and month in the same table: the workers add each
batch's cost per tenant (``switchyard.costs``) as they store its results.

The routers read both before they queue a tenant's work (:class:`Budgets`):
- under 80 % the work goes on as asked;
- from 80 % each read also says so (``warn``: the router files the fraction as the
  ``TenantBudgetUsed`` metric, whose alarm fires at 80, and ``switchyard status``
  flags the tenant);
- at 100 % or more, new work is refused (:class:`OverBudget`: 429 ``budget_exceeded``
  with a Retry-After up to the next month), or, where the tenant's ``over_budget`` is
  ``"batch"``, it is moved to the batch lane, where it waits for spare capacity.

A read is one ``BatchGetItem`` of two items. A router remembers a verdict of "under
budget" for a few seconds (a tenant's spend moves by a batch's cost at a time); it
never remembers a refusal, so the request after a raise goes through.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from switchyard.tables import RESULTS

OverBudgetMode = Literal["refuse", "batch"]
WARN_FRACTION = 0.8  # the alarm's threshold and `switchyard status`'s flag

# Items of the tenant's partition in the results table; neither holds a ``doc``, so
# neither is a request (``ResultStore.get`` answers None for them).
_LIMIT_KEY = "budget#limit"
_SPEND_PREFIX = "budget#spend#"
_TTL = RESULTS.ttl_attribute or "expires_at"
_SPEND_KEPT_SECONDS = 400 * 86_400  # a month's spend is kept about 13 months


def month_of(at: float) -> str:
    """The calendar month (UTC) of epoch second ``at``: ``"2026-11"``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m")


def next_month_starts(at: float) -> float:
    """The epoch second the month after ``at``'s begins (UTC)."""
    day = datetime.fromtimestamp(at, UTC)
    year, month = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


@dataclass(frozen=True)
class BudgetState:
    """One tenant's month: spent against budget (None: no budget)."""

    tenant: str
    month: str
    spent_usd: float
    budget_usd: float | None
    raised: bool = False  # the budget is an operator's, not the manifest's

    @property
    def used(self) -> float | None:
        """The fraction of the budget spent (None: no budget; inf: a budget of 0)."""
        if self.budget_usd is None:
            return None
        if self.budget_usd <= 0:
            return float("inf") if self.spent_usd > 0 or self.budget_usd == 0 else 0.0
        return self.spent_usd / self.budget_usd

    @property
    def over(self) -> bool:
        used = self.used
        return used is not None and used >= 1.0

    @property
    def warn(self) -> bool:
        used = self.used
        return used is not None and used >= WARN_FRACTION

    def as_dict(self) -> dict[str, Any]:
        used = self.used
        return {
            "tenant": self.tenant,
            "month": self.month,
            "spent_usd": round(self.spent_usd, 6),
            "budget_usd": self.budget_usd,
            "raised": self.raised,
            "used": None if used is None else (round(used, 4) if used != float("inf") else None),
            "warn": self.warn,
            "over": self.over,
        }


class OverBudget(Exception):
    """A tenant at or over its month's budget: its new work is refused until the
    month ends or an operator raises the budget."""

    code = "budget_exceeded"

    def __init__(self, state: BudgetState, retry_after_seconds: int) -> None:
        super().__init__(
            f"tenant {state.tenant} has spent ${state.spent_usd:.4f} of its "
            f"${state.budget_usd:.2f} budget for {state.month}; new work is refused until "
            "the month ends or the budget is raised"
        )
        self.state = state
        self.retry_after_seconds = retry_after_seconds


class BudgetStore(Protocol):
    """Where spend and raised budgets are kept, shared by every router and worker."""

    def read(self, tenant: str, month: str) -> tuple[float, float | None]:
        """The tenant's spend in ``month`` and its raised budget (None: none raised)."""
        ...

    def add_spend(self, spent: Mapping[str, float], month: str) -> None:
        """Add each tenant's ``spent`` (USD) to its spend in ``month``."""
        ...

    def set_budget(self, tenant: str, usd: float | None) -> None:
        """Raise (or lower) the tenant's budget to ``usd``; None: the manifest's again."""
        ...


class InMemoryBudgetStore:
    """:class:`BudgetStore` in one process: for unit tests of the rule."""

    def __init__(self) -> None:
        self.spend: dict[tuple[str, str], float] = {}
        self.raised: dict[str, float] = {}

    def read(self, tenant: str, month: str) -> tuple[float, float | None]:
        return self.spend.get((tenant, month), 0.0), self.raised.get(tenant)

    def add_spend(self, spent: Mapping[str, float], month: str) -> None:
        for tenant, usd in spent.items():
            self.spend[(tenant, month)] = self.spend.get((tenant, month), 0.0) + usd

    def set_budget(self, tenant: str, usd: float | None) -> None:
        if usd is None:
            self.raised.pop(tenant, None)
        else:
            self.raised[tenant] = usd


class DynamoDBBudgetStore:
    """:class:`BudgetStore` on the results table: in each tenant's partition, one item
    per month of spend (``budget#spend#2026-11``, attribute ``usd``, added to with
    ``ADD``) and one for a raised budget (``budget#limit``, attribute ``usd``)."""

    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self._ddb = dynamodb
        self._table = table
        self._clock = clock

    def _key(self, tenant: str, sort: str) -> dict[str, Any]:
        return {RESULTS.partition: {"S": tenant}, RESULTS.sort: {"S": sort}}

    def read(self, tenant: str, month: str) -> tuple[float, float | None]:
        spend_key = self._key(tenant, _SPEND_PREFIX + month)
        limit_key = self._key(tenant, _LIMIT_KEY)
        request = {self._table: {"Keys": [spend_key, limit_key], "ProjectionExpression": "#s, #u"}}
        names = {"#s": RESULTS.sort, "#u": "usd"}
        request[self._table]["ExpressionAttributeNames"] = names
        items: list[dict[str, Any]] = []
        for _ in range(3):  # unprocessed keys (throttling) are asked for again
            answer = self._ddb.batch_get_item(RequestItems=request)
            items += answer.get("Responses", {}).get(self._table, [])
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                break
        spent, raised = 0.0, None
        for item in items:
            usd = float(item["usd"]["N"]) if "usd" in item else None
            if item[RESULTS.sort]["S"] == _LIMIT_KEY:
                raised = usd
            elif usd is not None:
                spent = usd
        return spent, raised

    def add_spend(self, spent: Mapping[str, float], month: str) -> None:
        expires = int(self._clock()) + _SPEND_KEPT_SECONDS
        for tenant, usd in spent.items():
            if usd <= 0:
                continue
            self._ddb.update_item(
                TableName=self._table,
                Key=self._key(tenant, _SPEND_PREFIX + month),
                UpdateExpression="ADD #u :usd SET #ttl = :ttl",
                ExpressionAttributeNames={"#u": "usd", "#ttl": _TTL},
                ExpressionAttributeValues={
                    ":usd": {"N": f"{usd:.9f}"},
                    ":ttl": {"N": str(expires)},
                },
            )

    def set_budget(self, tenant: str, usd: float | None) -> None:
        key = self._key(tenant, _LIMIT_KEY)
        if usd is None:
            self._ddb.delete_item(TableName=self._table, Key=key)
            return
        self._ddb.put_item(
            TableName=self._table,
            Item={
                **key,
                "usd": {"N": repr(float(usd))},
                "set_at": {"N": f"{self._clock():.3f}"},
            },
        )


class TenantBudget(BaseModel):
    """What the manifest says of one tenant's budget (a router's settings carry it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    monthly_usd: float = Field(ge=0)
    over_budget: OverBudgetMode = "refuse"


class Budgets:
    """The routers' side: the lane a tenant's new work may take, or a refusal.

    ``budgets``: tenant -> its manifest budget; a tenant not named has none, and its
    work is never read against one. ``on_state``: called with each state read (the
    router files the metric the 80 % alarm watches)."""

    def __init__(
        self,
        store: BudgetStore,
        budgets: Mapping[str, TenantBudget],
        *,
        remember_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
        on_state: Callable[[BudgetState], None] | None = None,
    ) -> None:
        self._store = store
        self._budgets = dict(budgets)
        self._remember = remember_seconds
        self._clock = clock
        self._on_state = on_state
        self._under_until: dict[str, float] = {}  # tenant -> until when "under" holds

    def state(self, tenant: str) -> BudgetState:
        """The tenant's month as the store has it now."""
        now = self._clock()
        month = month_of(now)
        spent, raised = self._store.read(tenant, month)
        given = self._budgets.get(tenant)
        budget = raised if raised is not None else (given.monthly_usd if given else None)
        return BudgetState(tenant, month, spent, budget, raised=raised is not None)

    def lane_for(self, tenant: str, lane: str) -> str:
        """The lane a tenant's new request takes: ``lane``, or "batch" for a tenant
        over its budget whose ``over_budget`` is "batch"; raises :class:`OverBudget`
        for one whose new work is refused."""
        over = self._over(tenant)
        if over is None:
            return lane
        state, given = over
        if given.over_budget == "batch":
            return "batch"
        raise self._refusal(state)

    def admit_job(self, tenant: str) -> None:
        """A batch job's submission: refused (:class:`OverBudget`) for a tenant over
        its budget, unless its over-budget work goes to the batch lane, where a job
        runs anyway."""
        over = self._over(tenant)
        if over is not None and over[1].over_budget != "batch":
            raise self._refusal(over[0])

    def admit_stream(self, tenant: str) -> None:
        """A streamed generation: a caller reads it as it is made, so it has no batch
        lane to move to; refused (:class:`OverBudget`) for a tenant over its budget."""
        over = self._over(tenant)
        if over is not None:
            raise self._refusal(over[0])

    def _over(self, tenant: str) -> tuple[BudgetState, TenantBudget] | None:
        """The tenant's state and budget where it is at or over it, else None."""
        given = self._budgets.get(tenant)
        if given is None:
            return None
        now = self._clock()
        if self._under_until.get(tenant, 0.0) > now:
            return None
        state = self.state(tenant)
        if self._on_state is not None:
            self._on_state(state)
        if not state.over:
            self._under_until[tenant] = now + self._remember
            return None
        self._under_until.pop(tenant, None)
        return state, given

    def _refusal(self, state: BudgetState) -> OverBudget:
        now = self._clock()
        return OverBudget(state, max(1, int(next_month_starts(now) - now)))
