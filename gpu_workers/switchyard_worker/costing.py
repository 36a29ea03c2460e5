"""What a worker's requests cost, and what the worker's time was used for.

One :class:`CostKeeper` per worker process, shared by the stages of every model it
serves: the loops tell it each batch's seconds in the model (:meth:`ran`, the busy
time); the finisher has it price each batch's answers before they are stored
(:meth:`price`, ``switchyard.costs``) and hands it what was stored (:meth:`spent`),
which it adds up per tenant, model and version. A thread of its own writes, every
``meter_seconds`` and when the worker stops, the spend added up since and the
worker's running and busy seconds since (``switchyard.costs.CostLedger``), and
prints the spend as metrics (EMF, per tenant and model, and per tenant). Spend and
time are written in the same turn, so a reader sees them agree to within the
batches being stored at that moment.
"""

from __future__ import annotations

import threading
import time

from aws_lambda_powertools.metrics import MetricUnit

from switchyard.budgets import BudgetStore, month_of
from switchyard.costs import (
    CostLedger,
    CostRates,
    Group,
    PathPrices,
    Spend,
    price_answers,
    spend_by_group,
)
from switchyard.results import AsStored
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard.telemetry import COUNT, emit_metrics
from switchyard_worker.stages import log


class CostKeeper:
    """A worker's costs and time (the module's docstring)."""

    def __init__(
        self,
        *,
        rates: CostRates,
        ledger: CostLedger,
        service: str,
        worker_id: str,
        inline_bytes: int,
        meter_seconds: float = 5.0,
        emit: bool = True,
        budgets: BudgetStore | None = None,
    ) -> None:
        self.rates = rates
        self._ledger = ledger
        self._service = service
        self._worker_id = worker_id
        self._inline_bytes = inline_bytes
        self._meter_seconds = meter_seconds
        self._emit = emit
        self._lock = threading.Lock()
        self._busy = 0.0  # seconds in the model, not yet written
        self._spend: dict[Group, Spend] = {}  # stored answers' spend, not yet written
        # The paths priced so far, at these rates (priced on the finisher's thread).
        self._priced: PathPrices = {}
        # Each tenant's month's spend (switchyard.budgets), added up per write.
        self._budgets = budgets
        self._month_spend: dict[str, float] = {}  # tenant -> USD, not yet counted
        self._since = time.monotonic()  # the running time written so far ends here
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- from the loops and the finisher ------------------------------------------

    def ran(self, seconds: float) -> None:
        """The model ran a batch for ``seconds`` (the worker's busy time)."""
        with self._lock:
            self._busy += seconds

    def price(self, answers: list[tuple[QueueMessage, ResultRecord]]) -> AsStored:
        """Set each answer's cost, before it is stored; the answers' outputs and docs
        as their items hold them, worked out to size them (for the store to write)."""
        return price_answers(answers, self.rates, self._inline_bytes, self._priced)

    def spent(self, stored: list[ResultRecord]) -> dict[Group, Spend]:
        """Add what the stored answers cost (each stored once: a redelivery's copy is
        not stored, and not counted) to what is written next; their spend per tenant,
        model and version. A tenant's month's spend is counted from here."""
        groups = spend_by_group(stored)
        with self._lock:
            for group, spend in groups.items():
                self._spend.setdefault(group, Spend()).merge(spend)
        return groups

    # -- the meter's thread ---------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cost-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is left (the worker stops: its last seconds and spend)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.write()

    def _run(self) -> None:
        while not self._stopping.wait(self._meter_seconds):
            self.write()

    def write(self) -> None:
        """The spend and the time since the last write, to the ledger and as metrics;
        kept for the next turn if the ledger cannot be reached."""
        now = time.monotonic()
        with self._lock:
            running, self._since = now - self._since, now
            busy, self._busy = self._busy, 0.0
            spend, self._spend = self._spend, {}
        at = time.time()
        if self._emit and spend:
            self._print(spend)
        try:
            self._ledger.add_time(
                self._service,
                self._worker_id,
                running_seconds=running,
                busy_seconds=busy,
                usd_per_hour=self.rates.instance_per_hour,
                at=at,
            )
        except Exception:  # noqa: BLE001 - the next turn writes it
            log.exception("worker time not written", extra={"worker": self._worker_id})
            with self._lock:
                self._since -= running
                self._busy += busy
        left = {}
        for group, s in spend.items():
            try:
                self._ledger.add_spend({group: s}, at)
            except Exception:  # noqa: BLE001 - the next turn writes it
                left[group] = s
        if left:
            log.warning("spend not written", extra={"worker": self._worker_id, "groups": len(left)})
            with self._lock:
                for group, s in left.items():
                    self._spend.setdefault(group, Spend()).merge(s)
        self._count_months(spend, at)

    def _count_months(self, spend: dict[Group, Spend], at: float) -> None:
        """Add the tenants' spend to their month's, which their budgets are held to;
        what cannot be added now is added at the next write."""
        if self._budgets is None:
            return
        totals = self._month_spend
        for (tenant, _, _), s in spend.items():
            totals[tenant] = totals.get(tenant, 0.0) + s.usd
        if not totals:
            return
        try:
            self._budgets.add_spend(totals, month_of(at))
        except Exception:  # noqa: BLE001 - the next write adds it
            log.exception("month's spend not counted", extra={"worker": self._worker_id})
            return
        self._month_spend = {}

    def _print(self, spend: dict[Group, Spend]) -> None:
        """One EMF document per tenant and model, also filed under the tenant alone."""
        by_model: dict[tuple[str, str], Spend] = {}
        for (tenant, model, _), s in spend.items():
            by_model.setdefault((tenant, model), Spend()).merge(s)
        for (tenant, model), s in by_model.items():
            try:
                emit_metrics(
                    {
                        "CostUsd": (MetricUnit.NoUnit, s.usd),
                        "WorkerCostUsd": (MetricUnit.NoUnit, s.worker_usd),
                        "AwsCostUsd": (MetricUnit.NoUnit, s.aws_usd),
                        "WorkerSeconds": (MetricUnit.Seconds, s.worker_seconds),
                        "CostedRequests": (COUNT, float(s.requests)),
                    },
                    {"tenant": tenant},
                    tenant=tenant,
                    model=model,
                )
            except Exception:  # noqa: BLE001 - a metric is never worth the worker
                log.exception("cost metrics not printed", extra={"tenant": tenant})
